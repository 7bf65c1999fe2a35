"""``FlowControlMiddleware``: API Priority and Fairness in front of any ASGI app.

A thin shell around the core (``gateway.flowcontrol``), as kube-apiserver's
``priority-and-fairness.go`` is: describe, classify, estimate, admit (run now, queue, or 429),
set the ``X-Kubernetes-PF-*`` headers, release the seats when the response is done - or, for a
watch, once it is initialized (``watchinit``); for a websocket, when the handshake is answered.
Non-watch long-running requests (exec, proxy, logs, ...) bypass flow control, as in Kubernetes.

A request that may have to wait also listens for its client: if the client leaves while queued,
the request leaves its queue (reason ``cancelled``). Requests that can run at once skip that
listener, so the common path costs no extra task.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from asyncio import CancelledError
from collections.abc import Callable, Iterable
from typing import Final

from gateway.asgi.authn import RequestAuthenticator
from gateway.asgi.context import (
    CONTEXT_KEY,
    RequestContext,
    request_context,
)
from gateway.asgi.deadline import past_deadline, request_timeout
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.errorformat import (
    PathFormat,
    is_openwhisk,
    send_openwhisk_too_many,
    send_refused,
    throttled_message,
)
from gateway.asgi.innerapp import adds_response_headers, selector
from gateway.asgi.lifespan import run_lifespan
from gateway.asgi.readahead import DEFAULT_BUDGET, ReadAhead, ReadAheadBudget
from gateway.asgi.refusal import RequestRefused
from gateway.asgi.reject import send_too_many_requests
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.asgi.trim import release_free_memory
from gateway.asgi.watchinit import (
    AT_FIRST_CHUNK,
    AT_HEADERS,
    AT_MARKER,
    MarkerScanner,
    initialized_at,
)
from gateway.clock import Timer
from gateway.flowcontrol.borrowing import BorrowingAdjuster, check_period
from gateway.flowcontrol.controller import (
    Classification,
    FlowController,
    ObjectSet,
    check_server_concurrency_limit,
)
from gateway.flowcontrol.digest import READ_ONLY_VERBS, UNIT_WORK, RequestDigest, WorkEstimate
from gateway.flowcontrol.hold import Admission, Rejected, Waiter, try_start
from gateway.flowcontrol.queueset import NO_DEADLINE, Request
from gateway.http.framing import has_body
from gateway.http.running import running_task
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.http.websocket import ANSWERED, http_send
from gateway.reconfigure import Swap, Undo, assign

# (digest, classification, scope) -> seats; the scope lets rules match raw HTTP facts.
Estimator = Callable[[RequestDigest, Classification, Scope], WorkEstimate]
FS_HEADER: Final = b"x-kubernetes-pf-flowschema-uid"
PL_HEADER: Final = b"x-kubernetes-pf-prioritylevel-uid"
MAX_WAIT: Final = 60.0
# The messages that start a response: they carry the PF headers.
_HEADERS_MESSAGES: Final = frozenset(
    {"http.response.start", "websocket.accept", "websocket.http.response.start"}
)
TRIM_DELAY: Final = 1.0


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
        max_queued_body_bytes: int = DEFAULT_BUDGET,
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
        # What all queued requests together may read ahead of their bodies.
        self.read_ahead = ReadAheadBudget(max_queued_body_bytes, on_drained=self._drained)
        self._trimming: Timer | None = None
        self._wait_limit = self.wait_limit  # bound once: passed with every request
        # What the core calls at an executing request's deadline (``gateway.asgi.deadline``).
        self._on_expire: Callable[[Request], None] = _expire

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
        max_queued_body_bytes: int = DEFAULT_BUDGET,
    ) -> Swap:
        """A reload of APF (``gateway.reconfigure``): validated here, applied by the swap,
        which recomputes the levels' limits once and keeps queued and running requests."""
        check_server_concurrency_limit(server_concurrency_limit)
        check_period(borrowing_period)
        check_request_timeout(request_timeout)
        settings = assign(self, request_timeout=request_timeout, status_body=status_body)
        budget = assign(self.read_ahead, limit=max_queued_body_bytes)

        def swap() -> Undo:
            controller, adjuster = self.controller, self.adjuster
            old_config, old_limit = controller.config, controller.server_cl
            old_period = adjuster.period if adjuster is not None else borrowing_period
            undo_settings = settings()
            undo_budget = budget()

            def undo() -> None:
                undo_budget()
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

    def _drained(self) -> None:
        """Queued bodies were freed: return the memory to the OS a moment later, once the
        connections that carried them are closed too (one trim per burst)."""
        if self._trimming is None:
            self._trimming = self.controller.clock.call_later(TRIM_DELAY, self._trim)

    def _trim(self) -> None:
        self._trimming = None
        release_free_memory()

    def wait_limit(self, digest: RequestDigest) -> float:
        """apf-reference 5.7: a quarter of the request deadline (``request_timeout``: a longer
        ``?timeout=`` does not extend it; a watch has none, so ``requestTimeout``), at most a
        minute."""
        deadline = self.request_timeout
        if digest.info.verb != "watch":
            deadline = request_timeout(digest.info, deadline)
        return min(deadline / 4, MAX_WAIT)

    def _execution_timeout(self, digest: RequestDigest) -> float:
        """How long after its arrival a non-long-running request must be done, queue wait
        included (``gateway.asgi.deadline``); the core keeps the deadline."""
        info = digest.info
        if not info.query:  # most requests: no ?timeout= to read
            return self.request_timeout
        return request_timeout(info, self.request_timeout)

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

    def _startup(self) -> None:
        """Lifespan startup, on the running loop: build the controller now (a factory's) and
        start borrowing, rather than on the first request."""
        _ = self.controller  # the property builds it
        self.start()

    async def aclose(self) -> None:
        """Lifespan shutdown: stop borrowing and the authenticator's background work (the JWT
        issuers' key refreshes), which would otherwise outlive the event loop."""
        self.stop()
        if self._trimming is not None:
            self._trimming.cancel()
            self._trimming = None
        await self.describer.authenticator.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            if kind == "lifespan":
                await run_lifespan(self.app, scope, receive, send, startup=self._startup,
                                   shutdown=self.aclose)  # fmt: skip
            else:
                await self.app(scope, receive, send)
            return
        # The one wait before the request is described: a JWT issuer's keys not held yet, a
        # token webhook's answer not cached (``gateway.asgi.authn``); None costs nothing.
        prefetch = self.describer.authenticator.prefetch
        if prefetch is not None:
            await prefetch(scope)
        started = self._decide(scope)
        if isinstance(started, Admission):
            if kind == "http" and self._app_adds_headers and not started.watch:
                # The common case, without _run's coroutine: the app adds the PF headers
                # (kept under 1% for the APF on/off target, docs/performance.md).
                context = scope[CONTEXT_KEY]
                assert isinstance(context, RequestContext)
                headers = context.response_headers = self._pf_headers(started.classification)
                async with started:
                    # The deadline is the core's (set in _decide): nothing to do per request
                    # here but tell its cancellation from others.
                    try:
                        await self._inner(scope)(scope, receive, send)
                    except CancelledError:
                        if not context.deadline_passed:
                            raise
                    if context.deadline_passed:
                        await past_deadline(context, scope, send, headers)
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
                await self._reject(scope, send, rejected)
                return
            _waited(scope, self.controller.clock.now() - queued_at, None)
            await self._run(admission, scope, receive, send)
        elif isinstance(started, Rejected):
            await self._reject(scope, send, started)
        elif isinstance(started, RequestRefused):
            await send_refused(scope, http_send(scope, send), started, self.error_format)
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
        watch = verb == "watch"
        timeout = NO_DEADLINE  # watches and websockets have no deadline
        owner = None
        if not watch and scope["type"] == "http":
            timeout = self._execution_timeout(digest)
            owner = (running_task(), context)  # for _expire
        started = try_start(
            controller, classification, work, descr=digest, read_only=verb in READ_ONLY_VERBS,
            watch=watch, wait_limit=self._wait_limit, execution_timeout=timeout,
            on_expire=self._on_expire, owner=owner,
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
        its seats back once initialized (``gateway.asgi.watchinit``), a websocket once
        answered."""
        websocket = scope["type"] == "websocket"
        watch = admission.watch
        pf_headers = self._pf_headers(admission.classification)
        app = self._inner(scope)
        release_at = -1  # not a watch
        scanner: MarkerScanner | None = None
        context = request_context(scope)
        if watch:
            assert context is not None
            release_at = initialized_at(context.digest.info)
            if release_at == AT_MARKER:
                scanner = MarkerScanner()

        async def send_with_headers(message: Message) -> None:
            nonlocal release_at
            t = message["type"]
            if t in _HEADERS_MESSAGES:
                headers = message.get("headers", ())
                message["headers"] = [*headers, *pf_headers]
            if t == "http.response.start":
                if context is not None:
                    context.response_started = True
                if release_at == AT_MARKER and _encoded(headers):
                    release_at = AT_FIRST_CHUNK  # a compressed stream hides the marker
                await send(message)
                if release_at == AT_HEADERS:
                    admission.release()  # no initial events: established is initialized
                return
            if t == "http.response.body" and release_at >= AT_FIRST_CHUNK:
                await send(message)
                if scanner is None or scanner.feed(message.get("body", b"")):
                    admission.release()  # initial events out: the seats go back
                    release_at = -1
                return
            await send(message)
            if websocket and t in ANSWERED:
                admission.release()  # answered: the handshake's seats go back

        async with admission:
            if watch or websocket:
                await app(scope, receive, send_with_headers)
                return
            context = scope[CONTEXT_KEY]
            assert isinstance(context, RequestContext)
            try:  # the core keeps the deadline (_decide)
                await app(scope, receive, send_with_headers)
            except CancelledError:
                if not context.deadline_passed:
                    raise
            if context.deadline_passed:
                await past_deadline(context, scope, send_with_headers, [])

    async def _queued(self, waiter: Waiter, scope: Scope, receive: Receive, send: Send) -> None:
        """Wait for a seat while watching the client; a client that leaves leaves the queue."""
        now = self.controller.clock.now
        queued_at = now()
        ahead = ReadAhead(self.read_ahead)
        entering = asyncio.ensure_future(waiter.wait())
        listener = asyncio.ensure_future(ahead.listen(receive, has_body(scope)))
        try:
            try:
                await asyncio.wait((entering, listener), return_when=asyncio.FIRST_COMPLETED)
                if not entering.done() and not listener.result():
                    await asyncio.wait((entering,))  # reading ahead stopped: wait, not watching
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
                await self._reject(scope, send, rejected)
                return
            _waited(scope, now() - queued_at, None)
            await self._run(admission, scope, functools.partial(ahead.replay, receive), send)
        finally:
            ahead.release()

    async def _reject(self, scope: Scope, send: Send, rejected: Rejected) -> None:
        send = http_send(scope, send)  # a websocket handshake gets the same 429
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


def _expire(req: Request) -> None:
    """The core's call at an executing request's deadline: cancel its task, noting why (the
    task then answers with ``past_deadline``)."""
    task, context = req.owner
    context.deadline_passed = True
    task.cancel()


def _waited(scope: Scope, seconds: float, rejected: Rejected | str | None) -> None:
    """Record a queued request's wait, and its rejection if it was rejected, for the log."""
    context = scope[CONTEXT_KEY]
    assert isinstance(context, RequestContext)
    context.queue_wait = seconds
    if rejected is not None:
        context.apf = "rejected"
        context.apf_reason = rejected if isinstance(rejected, str) else rejected.reason


def _encoded(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            return True
    return False


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
