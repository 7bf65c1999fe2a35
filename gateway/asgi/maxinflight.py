"""What kube-apiserver does without APF: the max-in-flight filter (``maxinflight.go``).

Two independent limits, read-only (get/list/watch) and mutating (everything else); past them a
429 with ``Retry-After: 1``; long-running requests and ``system:masters`` are not counted; a limit
of 0 means unlimited.

``requestTimeout`` bounds an executing request here too, as kube-apiserver's
``WithTimeoutForNonLongRunningRequests`` runs whether APF is on or off: every non-long-running
HTTP request (``system:masters`` included, as the timeout filter does not look at the user) gets
kube's 504 at its deadline, or its connection closed if the response had started
(``gateway.asgi.deadline``); its in-flight slot goes back first.
"""

from __future__ import annotations

from asyncio import CancelledError, current_task
from collections.abc import Callable

from gateway.asgi.context import CONTEXT_KEY, RequestContext
from gateway.asgi.deadline import Deadlines, past_deadline, request_timeout
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.errorformat import (
    PathFormat,
    is_openwhisk,
    send_openwhisk_too_many,
    send_refused,
    throttled_message,
)
from gateway.asgi.innerapp import adds_response_headers
from gateway.asgi.refusal import RequestRefused
from gateway.asgi.reject import send_too_many_requests
from gateway.clock import AsyncioEventClock, EventClock
from gateway.flowcontrol.watermark import Watermark
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.http.websocket import ANSWERED, http_send
from gateway.reconfigure import Swap, assign

PRIVILEGED_GROUP = "system:masters"


def _limits(read_only: int, mutating: int) -> dict[str, int]:
    if read_only < 0 or mutating < 0:
        raise ValueError("max-in-flight limits must not be negative")
    return {"readOnly": read_only, "mutating": mutating}


def _check_request_timeout(seconds: float) -> None:
    if not seconds > 0:
        raise ValueError("request_timeout must be positive")


class MaxInFlightMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        describer: RequestDescriber,
        max_requests_inflight: int,
        max_mutating_requests_inflight: int,
        now: Callable[[], float],
        status_body: bool = False,
        on_reject: Callable[[str], None] | None = None,
        error_format: PathFormat | None = None,
        request_timeout: float = 60.0,
        clock: EventClock | None = None,
    ) -> None:
        _check_request_timeout(request_timeout)
        self.app = app
        self.describer = describer
        self.limits = _limits(max_requests_inflight, max_mutating_requests_inflight)
        self.now = now
        second = int(now())
        self.inflight = {"readOnly": Watermark(second), "mutating": Watermark(second)}
        self.status_body = status_body
        self.on_reject = on_reject
        self.error_format = error_format
        # The deadlines run on this clock (a test's fake one; else the running loop's).
        self.request_timeout = request_timeout
        self.clock: EventClock = clock if clock is not None else AsyncioEventClock()
        self.deadlines = Deadlines()
        # Whether the app notes its response start itself (``added_headers``); else ``send``
        # is wrapped to note it, which decides between the 504 and a closed connection.
        self._app_adds_headers = adds_response_headers(app)

    def prepare(
        self,
        *,
        max_requests_inflight: int,
        max_mutating_requests_inflight: int,
        status_body: bool,
        request_timeout: float | None = None,
    ) -> Swap:
        """A reload (``gateway.reconfigure``); requests already counted stay counted, and keep
        the deadline they started with."""
        limits = _limits(max_requests_inflight, max_mutating_requests_inflight)
        if request_timeout is None:
            request_timeout = self.request_timeout
        _check_request_timeout(request_timeout)
        return assign(self, limits=limits, status_body=status_body, request_timeout=request_timeout)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        prefetch = self.describer.authenticator.prefetch
        if prefetch is not None:  # as FlowControlMiddleware: an issuer's keys, a webhook
            await prefetch(scope)
        try:
            digest = self.describer.describe(scope)
        except RequestRefused as exc:
            await send_refused(scope, http_send(scope, send), exc, self.error_format)
            return
        context = scope[CONTEXT_KEY] = RequestContext(digest)
        if digest.long_running:
            context.apf = "bypassed"
            await self.app(scope, receive, send)
            return
        if PRIVILEGED_GROUP in digest.user.groups:
            context.apf = "bypassed"  # not counted, but bounded in time (websockets aside)
            if kind == "websocket" or not await self._bounded(scope, receive, send, context):
                return
            await past_deadline(context, scope, send, [])
            return
        request_kind = "readOnly" if digest.info.is_read_only else "mutating"
        limit = self.limits[request_kind]
        counter = self.inflight[request_kind]
        if limit and counter.current >= limit:
            context.apf = "rejected"
            context.apf_reason = "max-in-flight"
            if self.on_reject:
                self.on_reject(request_kind)
            send = http_send(scope, send)  # a websocket handshake gets the same 429
            if is_openwhisk(self.error_format, scope):
                message = throttled_message(counter.current, limit)
                await send_openwhisk_too_many(send, 1, message, None)
                return
            await send_too_many_requests(send, 1, status_body=self.status_body)
            return
        context.apf = "executed"
        counter.roll(int(self.now()))
        counter.add(1)
        counted = True

        def uncount() -> None:
            nonlocal counted
            if counted:
                counted = False
                counter.roll(int(self.now()))
                counter.add(-1)

        if kind == "websocket":
            # Counted for its handshake only, as APF holds a websocket's seats.
            inner_send = send

            async def send_counted(message: Message) -> None:
                await inner_send(message)
                if message["type"] in ANSWERED:
                    uncount()

            send = send_counted
            try:
                await self.app(scope, receive, send)
            finally:
                uncount()
            return
        try:
            passed = await self._bounded(scope, receive, send, context)
        finally:
            uncount()
        if passed:  # the slot is back already
            await past_deadline(context, scope, send, [])

    async def _bounded(
        self, scope: Scope, receive: Receive, send: Send, context: RequestContext
    ) -> bool:
        """Run the app within the request's deadline; True if the deadline cancelled it (the
        caller then answers with ``past_deadline``)."""
        clock = self.clock
        info = context.digest.info
        limit = self.request_timeout
        deadline = clock.now() + (request_timeout(info, limit) if info.query else limit)
        if not self._app_adds_headers:
            inner_send = send

            async def send_noted(message: Message) -> None:
                if message["type"] == "http.response.start":
                    context.response_started = True
                await inner_send(message)

            send = send_noted
        task = current_task()
        assert task is not None
        self.deadlines.enter(clock, task, deadline, context)
        try:
            await self.app(scope, receive, send)
        except CancelledError:
            if not context.deadline_passed:
                raise
        finally:
            self.deadlines.leave(task)
        return context.deadline_passed

    def watermark(self, kind: str) -> int:
        """The peak in-flight count of ``kind`` over the last completed second."""
        mark = self.inflight[kind]
        mark.roll(int(self.now()))
        return mark.reported
