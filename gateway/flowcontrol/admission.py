"""The asyncio shell around the synchronous core, for callers that simply wait in line.

``admit`` is ``try_start`` (``hold``) as one async context manager whose release cannot be
skipped: the seats go back when the block exits, whether it returns, raises or is cancelled, and
a caller that goes away while queued leaves its queue (reason ``cancelled``). The front door
uses ``try_start`` directly, as it also watches its client while queued.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gateway.flowcontrol.controller import Classification, FlowController
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.hold import Admission, Rejected, Waiter, try_start

__all__ = ["Admission", "Rejected", "Waiter", "admit", "try_start"]


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
    limit = None
    if wait_deadline is not None:
        deadline = wait_deadline
        limit = lambda _: deadline - controller.now()  # noqa: E731 - read only if it queues
    started = try_start(
        controller, classification, work,
        descr=descr, read_only=read_only, watch=watch, wait_limit=limit,
    )  # fmt: skip
    if isinstance(started, Rejected):
        raise started
    admission = await started.wait() if isinstance(started, Waiter) else started
    async with admission:
        yield admission
