"""Header hygiene between client and upstream (RFC 9110 section 7.6.1, plus identity headers).

Client-sent identity headers are always dropped: the router behind us trusts ``X-Remote-*`` from
our address, so only the identity we authenticated may reach it. So are their underscore
spellings (``X_Remote_User``): CGI, WSGI and several servers read ``-`` and ``_`` as the same
character, so ``X_Remote_User`` would arrive as the identity header (nginx drops such headers by
default for this reason). The same holds for every header the gateway drops or sets itself
(hop-by-hop, ``Host``, ``X-Forwarded-*``). ``Impersonate-*`` headers ask the upstream to act as
someone else; by default (``proxy.impersonation: reject``) such a request is refused with 403
rather than forwarded or silently run as the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal
from urllib.parse import quote

from gateway.flowcontrol.digest import UserInfo

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
    }
)
# Set by us, never copied from the client (X-Forwarded-For is extended instead). ``Expect``
# is answered by our own server; the upstream gets the body at once.
REPLACED = frozenset({b"host", b"x-forwarded-proto", b"x-forwarded-host", b"expect"})
FORWARD_USER = b"x-remote-user"
FORWARD_GROUP = b"x-remote-group"
FORWARD_EXTRA = b"x-remote-extra-"
IMPERSONATE = b"impersonate-"  # Impersonate-User, -Group, -Uid, -Extra-*
Impersonation = Literal["reject", "strip", "forward"]


class ImpersonationRefused(Exception):
    """The request carries ``Impersonate-*`` headers and the policy is ``reject`` (HTTP 403)."""


class HeaderPolicy:
    """Precomputed sets so the per-request loops are a few set lookups per header."""

    def __init__(
        self,
        *,
        identity_headers: Iterable[str] = (),
        identity_prefixes: Iterable[str] = (),
        forward_identity: bool = True,
        impersonation: Impersonation = "reject",
    ) -> None:
        self.drop_request = (
            HOP_BY_HOP
            | REPLACED
            | {FORWARD_USER, FORWARD_GROUP}
            | {_dashed(h.lower().encode("latin-1")) for h in identity_headers}
        )
        self.drop_prefixes = (
            FORWARD_EXTRA,
            *(_dashed(p.lower().encode("latin-1")) for p in identity_prefixes),
        )
        # Underscore spellings are dropped when their dashed form is dropped or set by us.
        self.drop_dashed = self.drop_request | {b"x-forwarded-for"}
        self.check_prefixes = (*self.drop_prefixes, IMPERSONATE)
        self.forward_identity = forward_identity
        self.impersonation = impersonation

    def request_headers(
        self,
        headers: Headers,
        *,
        client_host: str,
        scheme: str,
        user: UserInfo | None,
    ) -> Headers:
        """The headers to send upstream. Raises ``ImpersonationRefused``."""
        out: Headers = []
        drop = self.drop_request
        prefixes = self.drop_prefixes
        check = self.check_prefixes
        connection_tokens: frozenset[bytes] = frozenset()
        forwarded_for = b""
        host = b""
        for name, value in headers:
            if name in drop:
                if name == b"connection":
                    connection_tokens = _tokens(value)
                elif name == b"host":
                    host = value
                continue
            if name == b"x-forwarded-for":
                forwarded_for = value if not forwarded_for else forwarded_for + b", " + value
                continue
            # 0x5F is "_": an int membership test is ten times cheaper than b"_" in name.
            if 0x5F in name or name.startswith(check):
                dashed = _dashed(name)
                if dashed in self.drop_dashed or dashed.startswith(prefixes):
                    continue
                if dashed.startswith(IMPERSONATE) and self.impersonation != "forward":
                    if self.impersonation == "reject":
                        raise ImpersonationRefused(name.decode("latin-1"))
                    continue
            out.append((name, value))
        if connection_tokens:
            out = [(n, v) for n, v in out if n not in connection_tokens]
        client = client_host.encode("latin-1")
        out.append(
            (b"x-forwarded-for", forwarded_for + b", " + client if forwarded_for else client)
        )
        out.append((b"x-forwarded-proto", scheme.encode("latin-1")))
        if host:
            out.append((b"x-forwarded-host", host))
        if user is not None and self.forward_identity:
            out.append((FORWARD_USER, user.name.encode("utf-8")))
            for group in user.groups:
                out.append((FORWARD_GROUP, group.encode("utf-8")))
            for key, values in user.extra:
                name = FORWARD_EXTRA + _extra_key(key)
                for v in values:
                    out.append((name, v.encode("utf-8")))
        return out


INTERNAL = b"x-apf-"  # the platform's own headers between its parts (X-Apf-Proxied-By, ...)


def authenticated_headers(headers: Headers, token: str) -> Headers:
    """Headers for an upstream the front door authenticates to: its token in place of the
    client's ``Authorization``, and no client-sent platform header (``X-Apf-*``): the token
    makes the upstream believe what comes with it, so nothing of the client's may pass as
    the front door's."""
    out = [
        (n, v) for n, v in headers if n != b"authorization" and not _dashed(n).startswith(INTERNAL)
    ]
    out.append((b"authorization", b"Bearer " + token.encode("latin-1")))
    return out


def response_headers(headers: Headers) -> Headers:
    tokens: frozenset[bytes] = frozenset()
    for name, value in headers:
        if name == b"connection":
            tokens = _tokens(value)
    return [(n, v) for n, v in headers if n not in HOP_BY_HOP and n not in tokens]


def _dashed(name: bytes) -> bytes:
    return name.replace(b"_", b"-")


def _tokens(value: bytes) -> frozenset[bytes]:
    return frozenset(t.strip().lower() for t in value.split(b",") if t.strip())


def _extra_key(key: str) -> bytes:
    return quote(key.lower(), safe="").encode("ascii")
