"""The 429 kube-apiserver sends, and its Status-bodied variant for clients that want details."""

from __future__ import annotations

from gateway.http.status import send_bytes, send_status
from gateway.http.types import Send

TOO_MANY_REQUESTS_TEXT = b"Too many requests, please try again later.\n"
TEXT_CONTENT_TYPE = b"text/plain; charset=utf-8"


async def send_too_many_requests(
    send: Send,
    retry_after: int,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    status_body: bool = False,
    priority_level: str = "",
    reason: str = "",
) -> None:
    extra = [(b"retry-after", str(max(1, retry_after)).encode())]
    if headers:
        extra.extend(headers)
    if status_body:
        message = "Too many requests, please try again later."
        if priority_level:
            message += f" (priority level {priority_level!r}: {reason})"
        details = {"retryAfterSeconds": max(1, retry_after)}
        if priority_level:
            details_causes = [
                {"reason": reason, "field": "priorityLevel", "message": priority_level}
            ]
            await send_status(
                send, 429, message, details={**details, "causes": details_causes}, headers=extra
            )
            return
        await send_status(send, 429, message, details=details, headers=extra)
        return
    extra.append((b"x-content-type-options", b"nosniff"))
    await send_bytes(send, 429, TOO_MANY_REQUESTS_TEXT, TEXT_CONTENT_TYPE, extra)
