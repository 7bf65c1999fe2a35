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
from gateway.http.types import ASGIApp, Receive, Scope, Send
from gateway.metrics.watermark import Watermark

PRIVILEGED_GROUP = "system:masters"


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
        if max_requests_inflight < 0 or max_mutating_requests_inflight < 0:
            raise ValueError("max-in-flight limits must not be negative")
        self.app = app
        self.describer = describer
        self.limits = {
            "readOnly": max_requests_inflight,
            "mutating": max_mutating_requests_inflight,
        }
        self.inflight = {"readOnly": Watermark(now), "mutating": Watermark(now)}
        self.status_body = status_body
        self.on_reject = on_reject
        self.error_format = error_format

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            digest = self.describer.describe(scope)
        except RequestRefused as exc:
            await send_refused(scope, send, exc, self.error_format)
            return
        scope[CONTEXT_KEY] = RequestContext(digest)
        if digest.long_running or PRIVILEGED_GROUP in digest.user.groups:
            await self.app(scope, receive, send)
            return
        kind = "readOnly" if digest.info.is_read_only else "mutating"
        limit = self.limits[kind]
        counter = self.inflight[kind]
        if limit and counter.current >= limit:
            if self.on_reject:
                self.on_reject(kind)
            if is_openwhisk(self.error_format, scope):
                message = throttled_message(counter.current, limit)
                await send_openwhisk_too_many(send, 1, message, None)
                return
            await send_too_many_requests(send, 1, status_body=self.status_body)
            return
        counter.add(1)
        try:
            await self.app(scope, receive, send)
        finally:
            counter.add(-1)
