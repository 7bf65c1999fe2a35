"""What kube-apiserver does without APF: the max-in-flight filter (``maxinflight.go``).

Two independent limits, read-only (get/list/watch) and mutating (everything else); past them a
429 with ``Retry-After: 1``; long-running requests and ``system:masters`` are not counted; a limit
of 0 means unlimited.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.asgi.context import CONTEXT_KEY, RequestContext
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.errorformat import (
    PathFormat,
    is_openwhisk,
    send_openwhisk_too_many,
    send_refused,
    throttled_message,
)
from gateway.asgi.refusal import RequestRefused
from gateway.asgi.reject import send_too_many_requests
from gateway.flowcontrol.watermark import Watermark
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.http.websocket import ANSWERED, http_send
from gateway.reconfigure import Swap, assign

PRIVILEGED_GROUP = "system:masters"


def _limits(read_only: int, mutating: int) -> dict[str, int]:
    if read_only < 0 or mutating < 0:
        raise ValueError("max-in-flight limits must not be negative")
    return {"readOnly": read_only, "mutating": mutating}


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
    ) -> None:
        self.app = app
        self.describer = describer
        self.limits = _limits(max_requests_inflight, max_mutating_requests_inflight)
        self.now = now
        second = int(now())
        self.inflight = {"readOnly": Watermark(second), "mutating": Watermark(second)}
        self.status_body = status_body
        self.on_reject = on_reject
        self.error_format = error_format

    def prepare(
        self, *, max_requests_inflight: int, max_mutating_requests_inflight: int, status_body: bool
    ) -> Swap:
        """A reload (``gateway.reconfigure``); requests already counted stay counted."""
        limits = _limits(max_requests_inflight, max_mutating_requests_inflight)
        return assign(self, limits=limits, status_body=status_body)

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
        if digest.long_running or PRIVILEGED_GROUP in digest.user.groups:
            context.apf = "bypassed"
            await self.app(scope, receive, send)
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

    def watermark(self, kind: str) -> int:
        """The peak in-flight count of ``kind`` over the last completed second."""
        mark = self.inflight[kind]
        mark.roll(int(self.now()))
        return mark.reported
