"""The one admission decision: ``try_start`` and what it returns (its own module so the compiled
build covers it: every request goes through it).

``try_start`` starts a classified request in its level and returns one of three outcomes:
``Admission`` (it runs now and holds its seats until released; ``async with`` releases them),
``Rejected`` (answer 429), or ``Waiter`` (it is queued; ``await waiter.wait()`` for the
admission). Whether a request can run at once is decided only by the queue set; its direct
dispatch when nothing waits is an implementation detail there (``QueueSet._dispatch_at_once``).
The server-wide counts by kind (``RequestKindTracker``) change only here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any

from gateway.flowcontrol.controller import Classification, FlowController
from gateway.flowcontrol.digest import RequestDigest, WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, NO_DEADLINE, WAITING, Request

# How long a request that has to queue may wait, in seconds, given its ``descr``; called only
# for requests that do queue (parsing a ``timeout`` parameter is not free).
WaitLimit = Callable[[Any], float]


class Rejected(Exception):
    """Flow control refused the request; the HTTP layer answers 429 with ``retry_after``."""

    def __init__(self, reason: str, classification: Classification, retry_after: int) -> None:
        super().__init__(f"rejected by priority level {classification.priority_level!r}: {reason}")
        self.reason = reason
        self.classification = classification
        self.retry_after = retry_after


class _Started:
    """A started request: running (``Admission``) or queued (``Waiter``)."""

    __slots__ = ("classification", "controller", "read_only", "request", "watch")

    def __init__(
        self,
        controller: FlowController,
        classification: Classification,
        request: Request,
        *,
        read_only: bool,
        watch: bool,
    ) -> None:
        self.controller = controller
        self.classification = classification
        self.request = request
        self.read_only = read_only
        self.watch = watch


class Admission(_Started):
    """A running request's hold on its seats."""

    __slots__ = ("_released",)

    def __init__(
        self,
        controller: FlowController,
        classification: Classification,
        request: Request,
        *,
        read_only: bool,
        watch: bool,
    ) -> None:
        super().__init__(controller, classification, request, read_only=read_only, watch=watch)
        self._released = False
        controller.kinds.add("executing", read_only, 1)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the seats back now (a watch after its initial events); idempotent."""
        if self._released:
            return
        self._released = True
        controller = self.controller
        req = self.request
        stats = self.classification.flow_stats
        now = controller.now()
        stats.execution_seconds["watch" if self.watch else "regular"].observe(now - req.start_time)
        controller.kinds.add("executing", self.read_only, -1)
        controller.finish(self.classification, req)

    async def __aenter__(self) -> Admission:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class Waiter(_Started):
    """A request queued in its level. ``wait`` returns its admission (the caller then owns the
    seats) or raises ``Rejected``; a caller that stops waiting (cancelled, or ``abandon``) leaves
    the queue, or gives back seats granted in the meantime."""

    __slots__ = ("_decided", "_settled")

    def __init__(
        self,
        controller: FlowController,
        classification: Classification,
        request: Request,
        *,
        read_only: bool,
        watch: bool,
    ) -> None:
        super().__init__(controller, classification, request, read_only=read_only, watch=watch)
        self._settled = False
        # Set now, not in ``wait``: the decision can come before the waiting task first runs.
        self._decided: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        request.on_decided = self._on_decided
        controller.kinds.add("waiting", read_only, 1)

    def _on_decided(self, _: Request) -> None:
        if not self._decided.done():
            self._decided.set_result(None)

    async def wait(self) -> Admission:
        try:
            await self._decided
        except BaseException:
            self.abandon()
            raise
        self._settle()
        started = _outcome(self.controller, self.classification, self.request,
                           read_only=self.read_only, watch=self.watch)  # fmt: skip
        if isinstance(started, Rejected):
            raise started
        assert isinstance(started, Admission)  # a decided request no longer waits
        return started

    def abandon(self) -> None:
        """Stop waiting (idempotent; nothing to do once ``wait`` has returned or raised)."""
        if self._settled:
            return
        self._settle()
        req = self.request
        if req.state == WAITING:
            self.controller.cancel(self.classification, req, "cancelled")
        elif req.state == EXECUTING:  # seats granted that nobody will use
            self.controller.finish(self.classification, req)

    def _settle(self) -> None:
        self._settled = True
        self.controller.kinds.add("waiting", self.read_only, -1)


def _outcome(
    controller: FlowController,
    classification: Classification,
    req: Request,
    *,
    read_only: bool,
    watch: bool,
) -> Admission | Rejected | None:
    """A decided request's outcome; None while it waits."""
    state = req.state
    if state == EXECUTING:
        return Admission(controller, classification, req, read_only=read_only, watch=watch)
    if state == WAITING:
        return None
    retry_after = controller.retry_after(classification.priority_level)
    return Rejected(req.reason or "time-out", classification, retry_after)


def try_start(
    controller: FlowController,
    classification: Classification,
    work: WorkEstimate,
    *,
    descr: Any = None,
    read_only: bool = True,
    watch: bool = False,
    wait_limit: WaitLimit | None = None,
    execution_timeout: float = NO_DEADLINE,
    on_expire: Callable[[Request], None] | None = None,
    owner: Any = None,
) -> Admission | Rejected | Waiter:
    """The admission decision, the same for every request: run now, refused, or queued.
    ``descr`` (the request digest) re-classifies a request whose level is being removed since
    it was classified (a caller that awaited across a reload); the outcome carries the
    classification it started under, so its release reaches the same level. ``wait_limit``:
    how long a queued request may wait (None: no limit). ``execution_timeout``, ``on_expire``
    and ``owner``: its execution deadline, from now (``QueueSet.start_request``)."""
    if classification.level.quiescing and isinstance(descr, RequestDigest):
        classification = controller.classify(descr)
    req = controller.start(classification, work, descr=descr, execution_timeout=execution_timeout,
                           on_expire=on_expire, owner=owner)  # fmt: skip
    started = _outcome(controller, classification, req, read_only=read_only, watch=watch)
    if started is not None:
        return started
    if wait_limit is not None:
        controller.set_wait_deadline(classification, req, req.arrival_time + wait_limit(descr))
    return Waiter(controller, classification, req, read_only=read_only, watch=watch)
