"""Credential files: kube-apiserver's static token CSV and OpenWhisk API keys.

Both are read whole and validated before use, so a reload either swaps in a complete table or
keeps the old one; every error names the file and line.
"""

from __future__ import annotations

import csv
import stat
from dataclasses import dataclass
from pathlib import Path

from gateway.flowcontrol.digest import UserInfo
from gateway.settings.load import CredentialFileError

AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True, slots=True)
class OpenWhiskKey:
    uuid: str
    key: str
    user: UserInfo
    namespace: str


def with_authenticated(groups: tuple[str, ...]) -> tuple[str, ...]:
    return groups if AUTHENTICATED in groups else (*groups, AUTHENTICATED)


def read_bearer_token(path: str | Path) -> str:
    """The token an upstream route authenticates with (``upstreams[].bearerTokenFile``): one
    line of at least 16 characters, in a file others cannot read (a Kubernetes Secret mounted
    with ``defaultMode: 0440`` and the pod's ``fsGroup`` is fine; 0444 is not)."""
    try:
        mode = Path(path).stat().st_mode
        token = Path(path).read_text().strip()
    except OSError as exc:
        why = exc.strerror
        raise CredentialFileError(f"{path}: cannot read the upstream token: {why}") from None
    if mode & stat.S_IRWXO:
        raise CredentialFileError(
            f"{path}: the upstream token is readable by others (mode {stat.S_IMODE(mode):o})"
        )
    if len(token) < 16 or any(c.isspace() for c in token):
        raise CredentialFileError(f"{path}: the upstream token must be one word of 16+ characters")
    return token


def load_token_file(path: str | Path) -> dict[str, UserInfo]:
    """``token,user,uid[,"group1,group2"]`` per line (kube-apiserver ``--token-auth-file``)."""
    tokens: dict[str, UserInfo] = {}
    for lineno, row in _rows(path):
        if len(row) < 3:
            raise CredentialFileError(
                f"{path}:{lineno}: expected token,user,uid[,groups], got {len(row)} column(s)"
            )
        token, name, uid = (c.strip() for c in row[:3])
        if not token or not name:
            raise CredentialFileError(f"{path}:{lineno}: token and user must not be empty")
        if token in tokens:
            raise CredentialFileError(f"{path}:{lineno}: duplicate token for user {name!r}")
        groups: tuple[str, ...] = ()
        if len(row) > 3 and row[3].strip():
            groups = tuple(g.strip() for g in row[3].split(",") if g.strip())
        tokens[token] = UserInfo(name, with_authenticated(groups), uid)
    return tokens


def load_openwhisk_keys(path: str | Path) -> dict[str, OpenWhiskKey]:
    """``uuid:key,subject,namespace`` per line; the map is keyed by uuid."""
    keys: dict[str, OpenWhiskKey] = {}
    for lineno, row in _rows(path):
        if len(row) != 3:
            raise CredentialFileError(
                f"{path}:{lineno}: expected uuid:key,subject,namespace, got {len(row)} column(s)"
            )
        auth, subject, namespace = (c.strip() for c in row)
        uuid, sep, key = auth.partition(":")
        if not sep or not uuid or not key:
            raise CredentialFileError(f"{path}:{lineno}: API key must look like uuid:key")
        if not subject or not namespace:
            raise CredentialFileError(f"{path}:{lineno}: subject and namespace must not be empty")
        if uuid in keys:
            raise CredentialFileError(f"{path}:{lineno}: duplicate key uuid {uuid!r}")
        user = UserInfo(subject, (AUTHENTICATED,), uuid, extra=(("namespace", (namespace,)),))
        keys[uuid] = OpenWhiskKey(uuid, key, user, namespace)
    return keys


def _rows(path: str | Path) -> list[tuple[int, list[str]]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            row = next(csv.reader([line], skipinitialspace=True))
        except csv.Error as exc:
            raise CredentialFileError(f"{path}:{lineno}: {exc}") from exc
        rows.append((lineno, row))
    return rows
