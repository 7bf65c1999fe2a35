"""Requests the front door answers at once, before admission, with a Kubernetes ``Status``."""

from __future__ import annotations

from gateway.http.status import send_status
from gateway.http.types import Send


class RequestRefused(Exception):
    """Answered with ``code`` and ``prefix + message``; never queued, never forwarded."""

    code = 400
    reason = "BadRequest"
    prefix = ""


async def send_refusal(send: Send, exc: RequestRefused) -> None:
    await send_status(send, exc.code, exc.prefix + str(exc), reason=exc.reason)
