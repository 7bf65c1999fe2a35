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
from gateway.flowcontrol.hold import Admission
from gateway.flowcontrol.queueset import EXECUTING, REJECTED, WAITING, Request

__all__ = ["Admission", "Rejected", "admit"]


class Rejected(Exception):
    """Flow control refused the request; the HTTP layer answers 429 with ``retry_after``."""

    def __init__(self, reason: str, classification: Classification, retry_after: int) -> None:
        super().__init__(f"rejected by priority level {classification.priority_level!r}: {reason}")
        self.reason = reason
        self.classification = classification
        self.retry_after = retry_after


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
