"""The asyncio shell around the synchronous core: wait for a decision, hold seats, release.

``admit`` is an async context manager whose release cannot be skipped: the seats go back when
the block exits, whether it returns, raises or is cancelled, and a caller that goes away while
queued leaves its queue (reason ``cancelled``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gateway.flowcontrol.controller import Classification, FlowController
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, REJECTED, WAITING, Request


class Rejected(Exception):
    """Flow control refused the request; the HTTP layer answers 429 with ``retry_after``."""

    def __init__(self, reason: str, classification: Classification, retry_after: int) -> None:
        super().__init__(f"rejected by priority level {classification.priority_level!r}: {reason}")
        self.reason = reason
        self.classification = classification
        self.retry_after = retry_after


class Admission:
    """A running request's hold on its seats."""

    __slots__ = ("_released", "classification", "controller", "read_only", "request", "watch")

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
        self._released = False

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
        stats.execution_seconds["watch" if self.watch else "regular"].observe(
            controller.clock.now() - req.start_time
        )
        controller.kinds.add("executing", self.read_only, -1)
        controller.finish(self.classification, req)


@asynccontextmanager
async def admit(
    controller: FlowController,
    classification: Classification,
    work: WorkEstimate,
    *,
    wait_deadline: float | None = None,
    read_only: bool = True,
    watch: bool = False,
    descr: Any = None,
) -> AsyncIterator[Admission]:
    req = controller.start(classification, work, wait_deadline=wait_deadline, descr=descr)
    if req.state == WAITING:
        await _wait(controller, classification, req, read_only)
    if req.state == REJECTED:
        raise Rejected(
            req.reason, classification, controller.retry_after(classification.priority_level)
        )
    controller.kinds.add("executing", read_only, 1)
    admission = Admission(controller, classification, req, read_only=read_only, watch=watch)
    try:
        yield admission
    finally:
        admission.release()


async def _wait(
    controller: FlowController, classification: Classification, req: Request, read_only: bool
) -> None:
    loop = asyncio.get_running_loop()
    decided: asyncio.Future[None] = loop.create_future()

    def on_decided(_: Request) -> None:
        if not decided.done():
            decided.set_result(None)

    req.on_decided = on_decided
    kinds = controller.kinds
    kinds.add("waiting", read_only, 1)
    try:
        await decided
    except BaseException:
        # The caller went away: leave the queue, or give back seats granted meanwhile.
        if req.state == WAITING:
            controller.cancel(classification, req, "cancelled")
        elif req.state == EXECUTING:
            controller.finish(classification, req)
        raise
    finally:
        kinds.add("waiting", read_only, -1)
