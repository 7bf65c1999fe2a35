"""Who is calling: trusted front-door headers, or (temporary) OpenWhisk keys checked here.

The front door authenticates OpenWhisk API keys and forwards ``X-Remote-User`` and
``X-Remote-Extra-Namespace``; the router believes those headers only from its trusted
networks (default loopback). ``KeyFile`` is a stop-gap so ``apf-gateway up`` works before the
front door's ``serve`` exists: it checks HTTP Basic ``uuid:key`` itself. TEMPORARY: remove
once the front door forwards identity in every deployment.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from gateway.platform.errors import UNAUTHENTICATED, ApiError, not_authorized

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_TRUSTED = ("127.0.0.1/32", "::1/128")


@dataclass(frozen=True, slots=True)
class Identity:
    subject: str
    namespace: str

    def resolve(self, namespace: str) -> str:
        """``_`` is the caller's own namespace; any other must be it too."""
        if namespace in ("_", self.namespace):
            return self.namespace
        raise not_authorized(namespace)


def parse_networks(values: list[str] | tuple[str, ...]) -> list[Network]:
    return [ipaddress.ip_network(v, strict=False) for v in values]


def is_trusted(remote: str | None, networks: list[Network]) -> bool:
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    return any(address in net for net in networks)


class KeyFile:
    """Lines ``uuid:key,subject,namespace``; ``#`` comments and blank lines are ignored."""

    def __init__(self, entries: dict[str, tuple[str, Identity]]) -> None:
        self.entries = entries

    @classmethod
    def load(cls, path: str | Path) -> KeyFile:
        entries: dict[str, tuple[str, Identity]] = {}
        for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            uuid, sep, key = parts[0].partition(":")
            if len(parts) != 3 or not sep or not uuid or not key or not all(parts[1:]):
                raise ValueError(f"{path}:{number}: expected 'uuid:key,subject,namespace'")
            entries[uuid] = (key, Identity(parts[1], parts[2]))
        return cls(entries)

    def check(self, authorization: str | None) -> Identity:
        if not authorization or not authorization.lower().startswith("basic "):
            raise ApiError(401, UNAUTHENTICATED)
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, UNAUTHENTICATED) from None
        uuid, _, key = decoded.partition(":")
        entry = self.entries.get(uuid)
        if entry is None or not hmac.compare_digest(entry[0].encode(), key.encode()):
            raise ApiError(401, UNAUTHENTICATED)
        return entry[1]
