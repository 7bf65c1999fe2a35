"""A request's deadline while it executes, as kube-apiserver's ``WithRequestDeadline`` and
``WithTimeoutForNonLongRunningRequests`` (``request_deadline.go``, ``timeout.go``).

A non-long-running request must finish within ``requestTimeout`` of its arrival, or within its
``?timeout=`` when that is shorter (and positive); time spent queued counts. At the deadline the
request's task is cancelled, which abandons the upstream request (its connection is closed, not
reused), and the seats go back. The client gets kube's 504 ``Status`` when no response has
started; otherwise the framing it was promised cannot be kept, so the response is left
unfinished and the server closes the connection (kube-apiserver panics with
``http.ErrAbortHandler``).

The deadlines of the requests in flight share one clock timer, armed at the earliest: a timer
per request cost ~7% of APF-on instructions (docs/performance.md). With APF on the flow-control
core keeps them, on its ``Request`` with one timer per queue set, so admission adds no registry
work per request (decision 0032); with APF off the max-in-flight filter uses ``Deadlines``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Final

from gateway.asgi.context import RequestContext
from gateway.clock import EventClock, Timer
from gateway.flowcontrol.digest import RequestInfo
from gateway.http.abandon import ABANDONED
from gateway.http.status import send_status
from gateway.http.types import Scope, Send
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


class Deadlines:
    """The executing requests' deadlines: ``enter`` before running the app, ``leave`` after,
    however it ends. At a deadline the request's context is marked and its task cancelled;
    the caller then answers with ``past_deadline``."""

    def __init__(self) -> None:
        # task -> (deadline, context); read and written inline by admission's common path.
        self.live: dict[asyncio.Task[Any], tuple[float, RequestContext]] = {}
        self._clock: EventClock | None = None
        self._timer: Timer | None = None
        self.armed_at = math.inf

    def __len__(self) -> int:
        return len(self.live)

    def enter(
        self, clock: EventClock, task: asyncio.Task[Any], deadline: float, context: RequestContext
    ) -> None:
        self.live[task] = (deadline, context)
        if deadline < self.armed_at:
            self.arm(clock, deadline)

    def leave(self, task: asyncio.Task[Any]) -> None:
        self.live.pop(task, None)

    def arm(self, clock: EventClock, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._clock = clock
        self.armed_at = when
        self._timer = clock.call_at(when, self._fire)

    def _fire(self) -> None:
        clock = self._clock
        assert clock is not None
        self._timer = None
        self.armed_at = math.inf
        now = clock.now()
        upcoming = math.inf
        for task, (deadline, context) in list(self.live.items()):
            if deadline <= now:
                del self.live[task]
                context.deadline_passed = True
                task.cancel()
            elif deadline < upcoming:
                upcoming = deadline
        if upcoming < math.inf:
            self.arm(clock, upcoming)


async def past_deadline(
    context: RequestContext, scope: Scope, send: Send, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer a request its deadline cancelled: kube's 504 if nothing was sent, else leave the
    response unfinished so the server closes the connection. ``headers``: the PF headers, when
    ``send`` does not add them."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        task.uncancel()  # the deadline's cancellation, handled here
    if not context.response_started:
        await send_status(send, 504, TIMEOUT_MESSAGE, headers=headers)
        return
    log.info("%s %s: deadline passed mid-response; closing the client connection",
             scope.get("method"), scope.get("path"))  # fmt: skip
    ABANDONED.set(True)
