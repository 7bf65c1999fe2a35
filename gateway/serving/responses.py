"""Complete responses written straight to a connection, below the ASGI app.

They are answered by the connection layer (no request was dispatched, or its framing is in
doubt), so they are raw bytes with ``Connection: close``, the same on zttp and httptools.
"""

from __future__ import annotations

from http import HTTPStatus

from gateway.http.status import status_body

# Kubernetes has no reason of its own for these codes; these are the closest StatusReasons.
_REASONS = {408: "Timeout", 431: "RequestEntityTooLarge", 503: "ServiceUnavailable"}


def closing_response(code: int, message: str, *, retry_after: int | None = None) -> bytes:
    """A ``Status`` JSON response that tells the client the connection closes after it."""
    body = status_body(code, message, reason=_REASONS.get(code))
    head = [
        f"HTTP/1.1 {code} {HTTPStatus(code).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body
