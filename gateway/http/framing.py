"""How a request's body is framed, read from its ASGI scope (the proxy streams by it; a queued
request reads ahead only when there is a body)."""

from __future__ import annotations

from gateway.http.types import Scope


def body_framing(scope: Scope) -> tuple[int, bool]:
    """(Content-Length or -1, chunked); the server already refused conflicting framings."""
    length = -1
    chunked = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            length = int(value) if value.isdigit() else -1
        elif name == b"transfer-encoding":
            chunked = True
    return length, chunked


def has_body(scope: Scope) -> bool:
    length, chunked = body_framing(scope)
    return length > 0 or chunked
