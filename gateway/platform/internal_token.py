"""The shared token of the platform's internal APIs (manager API, router ``/_platform/*``,
router-to-router hops): ``Authorization: Bearer <token>``, compared in constant time.

Where it comes from: the environment variable ``APF_INTERNAL_TOKEN`` if set (Kubernetes: from
a Secret), else a file (``apf-gateway up`` writes a fresh one per run; ``manager serve``
creates ``<state-dir>/internal-token`` when it is missing). A file must be the owner's only
(mode 0600 or stricter), as ssh insists for keys: a token others can read is no token.
The token is never sent to action containers (they get their own secret).
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from gateway.platform.errors import error_body

ENV = "APF_INTERNAL_TOKEN"
UNAUTHORIZED = (
    "This is an internal API of the platform: send the internal token as "
    "'Authorization: Bearer <token>' (see docs/platform.md, 'Isolation and trust')."
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def write(path: Path) -> str:
    """A fresh token in ``path`` (0600; its directory 0700 if created)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    tmp.replace(path)
    return token


def read(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the internal token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(
            f"the internal token file {path} is readable by others "
            f"(mode {stat.S_IMODE(mode):o}): chmod 600 it"
        )
    if len(token) < 16:
        raise ValueError(f"the internal token in {path} is shorter than 16 characters")
    return token


def resolve(path: str | Path | None, *, create: bool = False) -> str:
    """``APF_INTERNAL_TOKEN``, else the file (created if ``create`` and missing)."""
    env = os.environ.get(ENV, "").strip()
    if env:
        if len(env) < 16:
            raise ValueError(f"{ENV} is shorter than 16 characters")
        return env
    if path is None:
        raise ValueError(f"no internal token: set {ENV} or pass --internal-token-file")
    file = Path(path)
    if create and not file.exists():
        return write(file)
    return read(file)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def matches(header: str | None, token: str) -> bool:
    given = (header or "").encode("utf-8", "replace")
    return hmac.compare_digest(given, f"Bearer {token}".encode())


def middleware(
    token: str, protected: Callable[[str], bool]
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """401 with an OpenWhisk-shaped body for protected paths without the token."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if protected(request.path) and not matches(request.headers.get("Authorization"), token):
            return web.Response(
                status=401,
                body=error_body(UNAUTHORIZED),
                content_type="application/json",
                headers={"WWW-Authenticate": 'Bearer realm="apf-gateway-internal"'},
            )
        return await handler(request)

    return check
