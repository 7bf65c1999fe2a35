"""Time as the core sees it: a read-only ``now`` plus callbacks scheduled on an event clock.

The core never calls ``time.monotonic`` or ``asyncio.sleep``; production passes
``AsyncioEventClock`` and tests pass ``gateway.testing.FakeEventClock``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Seconds on a monotonic scale; only differences are meaningful."""

    def now(self) -> float: ...


class EventClock(Clock, Protocol):
    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` once ``now() >= when``; past times run as soon as possible."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


class AsyncioEventClock:
    """The running event loop's clock (``loop.time()``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now(self) -> float:
        return self.loop.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return self.loop.call_at(when, callback)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return self.loop.call_later(delay, callback)
