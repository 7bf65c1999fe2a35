"""``FlowControlMiddleware``: API Priority and Fairness in front of any ASGI app.

A thin shell around the core (``gateway.flowcontrol``), as kube-apiserver's
``priority-and-fairness.go`` is: describe, classify, estimate, admit (run now, queue, or 429),
set the ``X-Kubernetes-PF-*`` headers, release the seats when the response is done - or, for a
watch, when its first body chunk is out; for a websocket, when the handshake is answered.
Non-watch long-running requests (exec, proxy, logs, ...) bypass flow control, as in Kubernetes.

A request that may have to wait also listens for its client: if the client leaves while queued,
the request leaves its queue (reason ``cancelled``). Requests that can run at once skip that
listener, so the common path costs no extra task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

from gateway.asgi.authn import RequestAuthenticator
from gateway.asgi.context import (
    CONTEXT_KEY,
    RequestContext,
)
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.errorformat import (
    PathFormat,
    is_openwhisk,
    send_openwhisk_too_many,
    send_refused,
    throttled_message,
)
from gateway.asgi.innerapp import adds_response_headers, selector
from gateway.asgi.refusal import RequestRefused
from gateway.asgi.reject import send_too_many_requests
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.borrowing import BorrowingAdjuster, check_period
from gateway.flowcontrol.controller import (
    Classification,
    FlowController,
    ObjectSet,
    check_server_concurrency_limit,
)
from gateway.flowcontrol.digest import READ_ONLY_VERBS, UNIT_WORK, RequestDigest, WorkEstimate
from gateway.flowcontrol.hold import Admission, Rejected, Waiter, try_start
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.reconfigure import Swap, Undo, assign
from gateway.settings.load import parse_duration

# (digest, classification, scope) -> seats; the scope lets rules match raw HTTP facts.
Estimator = Callable[[RequestDigest, Classification, Scope], WorkEstimate]
FS_HEADER: Final = b"x-kubernetes-pf-flowschema-uid"
PL_HEADER: Final = b"x-kubernetes-pf-prioritylevel-uid"
MAX_WAIT: Final = 60.0
# Request body read ahead while a request waits in a queue (to notice a disconnect behind it).
MAX_BUFFERED_BODY: Final = 1024 * 1024


def check_request_timeout(seconds: float) -> None:
    if not seconds > 0:
        raise ValueError("request_timeout must be positive")


def unit_estimator(
    digest: RequestDigest, classification: Classification, scope: Scope
) -> WorkEstimate:
    return UNIT_WORK


class FlowControlMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        controller: FlowController | Callable[[], FlowController],
        describer: RequestDescriber | None = None,
        authenticator: RequestAuthenticator | None = None,
        estimator: Estimator = unit_estimator,
        borrowing_period: float | None = 10.0,
        request_timeout: float = 60.0,
        status_body: bool = False,
        error_format: PathFormat | None = None,
    ) -> None:
        check_request_timeout(request_timeout)
        if describer is not None and authenticator is not None:
            raise ValueError("pass either describer or authenticator, not both")
        self.app = app
        # An inner app that can pick a lighter app per request (LearningApp.select: most
        # requests skip its layer); called once the request is admitted and estimated.
        self._select: Callable[[Scope], ASGIApp] | None = selector(app)
        self._app_adds_headers = adds_response_headers(app)
        # A factory defers building the controller (which reads the loop's clock) to the
        # first event, so the middleware can be created at import time in a sidecar.
        self._factory = None if isinstance(controller, FlowController) else controller
        self._controller = controller if isinstance(controller, FlowController) else None
        self.describer = describer or RequestDescriber(
            authenticator or RequestAuthenticator(), RequestInfoParser()
        )
        self.estimator = estimator
        # The controller's borrowing adjuster has one owner: this middleware. It is built with
        # the controller (now, or on first use from a factory) and runs from ``start()``, which
        # a factory-built controller's first use calls itself. None: no borrowing.
        self.borrowing_period = borrowing_period
        self.adjuster: BorrowingAdjuster | None = None
        if self._controller is not None:
            self._own(self._controller)
        self.request_timeout = request_timeout
        self.status_body = status_body
        # Which paths get OpenWhisk-shaped 401/429 (None: Kubernetes everywhere).
        self.error_format = error_format
        self.draining = False
        self._wait_limit = self.wait_limit  # bound once: passed with every request

    @property
    def controller(self) -> FlowController:
        if self._controller is None:
            assert self._factory is not None
            self._controller = self._factory()
            self._own(self._controller)
            self.start()  # first use is on the running loop
        return self._controller

    def _own(self, controller: FlowController) -> None:
        if self.borrowing_period:
            self.adjuster = BorrowingAdjuster(
                controller, controller.clock, period=self.borrowing_period
            )

    def start(self) -> None:
        """Start borrowing (on the running loop: the adjuster's timer needs its clock)."""
        if self.adjuster is not None:
            self.adjuster.start()

    def stop(self) -> None:
        if self.adjuster is not None:
            self.adjuster.stop()

    def prepare(
        self,
        *,
        config: ObjectSet,
        server_concurrency_limit: int,
        borrowing_period: float,
        request_timeout: float,
        status_body: bool,
    ) -> Swap:
        """A reload of APF (``gateway.reconfigure``): validated here, applied by the swap,
        which recomputes the levels' limits once and keeps queued and running requests."""
        check_server_concurrency_limit(server_concurrency_limit)
        check_period(borrowing_period)
        check_request_timeout(request_timeout)
        settings = assign(self, request_timeout=request_timeout, status_body=status_body)

        def swap() -> Undo:
            controller, adjuster = self.controller, self.adjuster
            old_config, old_limit = controller.config, controller.server_cl
            old_period = adjuster.period if adjuster is not None else borrowing_period
            undo_settings = settings()

            def undo() -> None:
                undo_settings()
                controller.reconfigure(old_config, old_limit)
                if adjuster is not None:
                    adjuster.reconfigure(old_period)

            try:
                controller.reconfigure(config, server_concurrency_limit)
                if adjuster is not None:
                    adjuster.reconfigure(borrowing_period)
            except BaseException:
                undo()
                raise
            return undo

        return swap

    def wait_limit(self, digest: RequestDigest) -> float:
        """apf-reference 5.7: a quarter of the request deadline, at most a minute."""
        deadline = self.request_timeout
        if digest.info.verb != "watch":
            given = digest.info.query_value("timeout")
            if given:
                parsed = parse_duration(given)
                if parsed is not None and parsed > 0:
                    deadline = parsed
        return min(deadline / 4, MAX_WAIT)

    def drain(self) -> None:
        """Shutdown: refuse everything queued (429) and let nothing new wait."""
        self.draining = True
        for level in list(self.controller.levels.values()):
            qs = level.qs
            for queue in list(qs.queues):
                for req in qs.waiting_requests(queue):
                    qs.cancel(req, "time-out")

    def _pf_headers(self, c: Classification) -> list[tuple[bytes, bytes]]:
        return [(FS_HEADER, c.fs_uid.encode()), (PL_HEADER, c.pl_uid.encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = self._decide(scope)
        if isinstance(started, Admission):
            if kind == "http" and self._app_adds_headers and not started.watch:
                # The common case, without _run's coroutine: the app adds the PF headers
                # (kept under 1% for the APF on/off target, docs/performance.md).
                context = scope[CONTEXT_KEY]
                assert isinstance(context, RequestContext)
                context.response_headers = self._pf_headers(started.classification)
                async with started:
                    await self._inner(scope)(scope, receive, send)
                return
            await self._run(started, scope, receive, send)
        elif isinstance(started, Waiter):
            if kind == "http":
                await self._queued(started, scope, receive, send)
                return
            queued_at = self.controller.clock.now()
            try:
                admission = await started.wait()
            except Rejected as rejected:
                _waited(scope, self.controller.clock.now() - queued_at, rejected)
                await self._reject(kind, scope, send, rejected)
                return
            _waited(scope, self.controller.clock.now() - queued_at, None)
            await self._run(admission, scope, receive, send)
        elif isinstance(started, Rejected):
            await self._reject(kind, scope, send, started)
        elif isinstance(started, RequestRefused):
            if kind == "http":
                await send_refused(scope, send, started, self.error_format)
            else:
                await send({"type": "websocket.close", "code": 1008})
        else:  # long-running, not a watch: not flow controlled
            await self.app(scope, receive, send)

    def _decide(self, scope: Scope) -> Admission | Rejected | Waiter | RequestRefused | None:
        """Describe, classify, estimate and start: the one admission decision, for every
        request (None: a long-running request that bypasses flow control). A plain method:
        compiled, a coroutine keeps every local in its frame object, so the less it holds the
        cheaper it runs."""
        try:
            digest = self.describer.describe(scope)
        except RequestRefused as exc:
            return exc
        context = scope[CONTEXT_KEY] = RequestContext(digest)
        if digest.bypasses_flow_control:
            context.apf = "bypassed"
            return None
        controller = self.controller
        classification = controller.classify(digest)
        work = self.estimator(digest, classification, scope)
        context.classification = classification
        context.work = work
        verb = digest.info.verb
        started = try_start(
            controller, classification, work, descr=digest, read_only=verb in READ_ONLY_VERBS,
            watch=verb == "watch", wait_limit=self._wait_limit,
        )  # fmt: skip
        if isinstance(started, Admission):
            context.apf = "executed"
        elif isinstance(started, Waiter):
            context.apf = "queued"
        else:
            context.apf = "rejected"
            context.apf_reason = started.reason
        return started

    def _inner(self, scope: Scope) -> ASGIApp:
        """The app to run now: the inner app's choice for this request, when it offers one."""
        return self.app if self._select is None else self._select(scope)

    async def _run(self, admission: Admission, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app holding the seats, adding the PF headers to its response; a watch gives
        its seats back once its first body chunk is out, a websocket once answered."""
        websocket = scope["type"] == "websocket"
        watch = admission.watch
        pf_headers = self._pf_headers(admission.classification)
        app = self._inner(scope)

        async def send_with_headers(message: Message) -> None:
            t = message["type"]
            if t == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *pf_headers]
            elif (watch and t == "http.response.body") or (
                websocket and t in ("websocket.accept", "websocket.close")
            ):
                await send(message)
                admission.release()  # initial phase over: the seats go back
                return
            await send(message)

        async with admission:
            await app(scope, receive, send_with_headers)

    async def _queued(self, waiter: Waiter, scope: Scope, receive: Receive, send: Send) -> None:
        """Wait for a seat while watching the client; a client that leaves leaves the queue."""
        buffered: list[Message] = []

        async def listen() -> bool:
            """True when the client left; False when the body buffered here reached its cap
            (the rest stays in the socket, where the server's flow control holds it)."""
            size = 0
            while size < MAX_BUFFERED_BODY:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return True
                buffered.append(message)
                size += len(message.get("body", b""))
            return False

        now = self.controller.clock.now
        queued_at = now()
        entering = asyncio.ensure_future(waiter.wait())
        listener = asyncio.ensure_future(listen())
        try:
            await asyncio.wait((entering, listener), return_when=asyncio.FIRST_COMPLETED)
            if not entering.done() and not listener.result():
                await asyncio.wait((entering,))  # cap reached: wait without watching
        except BaseException:
            await _abandon(waiter, entering, listener)
            raise
        listener.cancel()
        if not entering.done():  # the client went away while queued
            await _abandon(waiter, entering, listener)
            _waited(scope, now() - queued_at, "cancelled")
            return
        try:
            admission = entering.result()
        except Rejected as rejected:
            _waited(scope, now() - queued_at, rejected)
            await self._reject("http", scope, send, rejected)
            return
        _waited(scope, now() - queued_at, None)

        async def replay() -> Message:
            if buffered:
                return buffered.pop(0)
            return await receive()

        await self._run(admission, scope, replay, send)

    async def _reject(self, kind: str, scope: Scope, send: Send, rejected: Rejected) -> None:
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1013})  # try again later
            return
        pf_headers = self._pf_headers(rejected.classification)
        if is_openwhisk(self.error_format, scope):
            qs = rejected.classification.level.qs
            in_flight = qs.tot_requests_executing + qs.tot_requests_waiting
            message = throttled_message(
                in_flight, qs.concurrency_limit, shutting_down=self.draining
            )
            await send_openwhisk_too_many(send, rejected.retry_after, message, pf_headers)
            return
        await send_too_many_requests(
            send, rejected.retry_after, headers=pf_headers, status_body=self.status_body,
            priority_level=rejected.classification.priority_level, reason=rejected.reason,
        )  # fmt: skip


def _waited(scope: Scope, seconds: float, rejected: Rejected | str | None) -> None:
    """Record a queued request's wait, and its rejection if it was rejected, for the log."""
    context = scope[CONTEXT_KEY]
    assert isinstance(context, RequestContext)
    context.queue_wait = seconds
    if rejected is not None:
        context.apf = "rejected"
        context.apf_reason = rejected if isinstance(rejected, str) else rejected.reason


async def _abandon(
    waiter: Waiter, entering: asyncio.Future[Admission], listener: asyncio.Future[bool]
) -> None:
    """Stop waiting; if a seat was granted in the meantime, give it back."""
    listener.cancel()
    if not entering.done():
        entering.cancel()
        with contextlib.suppress(BaseException):
            await entering
    if entering.done() and not entering.cancelled() and entering.exception() is None:
        entering.result().release()
    waiter.abandon()  # a task cancelled before it first ran never waited: leave the queue
