"""Kubernetes ``metav1.Status`` bodies, so kubectl-style clients can read our errors.

Reasons follow ``k8s.io/apimachinery/pkg/apis/meta/v1`` (``StatusReason``); 502 has no Kubernetes
reason of its own, so it uses ``ServiceUnavailable`` as kube-apiserver's proxy does for
unreachable backends.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.http.types import Send

# code -> StatusReason
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "RequestEntityTooLarge",
    429: "TooManyRequests",
    500: "InternalError",
    502: "ServiceUnavailable",
    503: "ServiceUnavailable",
    504: "Timeout",
}

JSON_CONTENT_TYPE = b"application/json"


def status_body(
    code: int, message: str, *, reason: str | None = None, details: dict[str, Any] | None = None
) -> bytes:
    """A serialized ``Status`` with ``status: Failure``."""
    doc: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        doc["details"] = details
    return json.dumps(doc, separators=(",", ":")).encode()


async def send_status(
    send: Send,
    code: int,
    message: str,
    *,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = status_body(code, message, reason=reason, details=details)
    await send_bytes(send, code, body, JSON_CONTENT_TYPE, headers)


async def send_bytes(
    send: Send,
    code: int,
    body: bytes,
    content_type: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Send a complete response in two ASGI messages."""
    raw = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
    ]
    if headers:
        raw.extend(headers)
    await send({"type": "http.response.start", "status": code, "headers": raw})
    await send({"type": "http.response.body", "body": body})
