"""A request's deadline while it executes, as kube-apiserver's ``WithRequestDeadline`` and
``WithTimeoutForNonLongRunningRequests`` (``request_deadline.go``, ``timeout.go``).

A non-long-running request must finish within ``requestTimeout`` of its arrival, or within its
``?timeout=`` when that is shorter (and positive); time spent queued counts. At the deadline the
app is cancelled, which abandons the upstream request (its connection is closed, not reused),
and the seats go back. The client gets kube's 504 ``Status`` when no response has started;
otherwise the framing it was promised cannot be kept, so the response is left unfinished and
the server closes the connection (kube-apiserver panics with ``http.ErrAbortHandler``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from gateway.clock import EventClock
from gateway.flowcontrol.digest import RequestInfo
from gateway.http.abandon import ABANDONED
from gateway.http.status import send_status
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.settings.load import parse_duration

log = logging.getLogger("gateway.deadline")

# kube-apiserver's message (``apierrors.NewTimeoutError``) for a request past its deadline.
TIMEOUT_MESSAGE: Final = "Timeout: request did not complete within the allotted timeout"


def request_timeout(info: RequestInfo, maximum: float) -> float:
    """``?timeout=`` when it is positive and below ``maximum`` (``requestTimeout``), else
    ``maximum``: a client may shorten its deadline, never lengthen it."""
    given = info.query_value("timeout")
    if given:
        parsed = parse_duration(given)
        if parsed is not None and 0 < parsed < maximum:
            return parsed
    return maximum


async def run_bounded(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    clock: EventClock,
    deadline: float,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Run ``app`` until it returns or ``deadline`` (on ``clock``) passes. ``headers`` go on
    the 504 (the PF headers, when ``send`` does not add them)."""
    task = asyncio.current_task()
    assert task is not None
    # 0: nothing sent; 1: response started; 2: response complete.
    progress = 0
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        timed_out = True
        task.cancel()

    async def tracking_send(message: Message) -> None:
        nonlocal progress
        t = message["type"]
        if t == "http.response.start":
            progress = 1
        elif t == "http.response.body" and not message.get("more_body", False):
            progress = 2
        await send(message)

    timer = clock.call_at(deadline, expire)
    try:
        await app(scope, receive, tracking_send)
    except asyncio.CancelledError:
        if not timed_out:
            raise
    finally:
        timer.cancel()
    if not timed_out:
        return
    if task.cancelling():
        task.uncancel()  # our cancellation, handled here
    if progress == 0:
        await send_status(send, 504, TIMEOUT_MESSAGE, headers=headers)
    elif progress == 1:
        log.info("%s %s: deadline passed mid-response; closing the client connection",
                 scope.get("method"), scope.get("path"))  # fmt: skip
        ABANDONED.set(True)
