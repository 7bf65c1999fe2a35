"""A deterministic event clock: time moves only when the test (or simulator) moves it."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class FakeTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeEventClock:
    """Callbacks due at the same instant run in the order they were scheduled."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._queue: list[tuple[float, int, FakeTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(max(when, self._now), callback)
        heapq.heappush(self._queue, (timer.when, next(self._seq), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        return self.call_at(self._now + delay, callback)

    def next_due(self) -> float | None:
        """The time of the next pending callback, or None."""
        while self._queue and self._queue[0][2].cancelled:
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    def run_until(self, when: float) -> None:
        """Run every callback due up to ``when`` in time order, then set the time to ``when``."""
        while True:
            due = self.next_due()
            if due is None or due > when:
                break
            _, _, timer = heapq.heappop(self._queue)
            self._now = timer.when
            timer.callback()
        self._now = max(self._now, when)

    def advance(self, delta: float) -> None:
        self.run_until(self._now + delta)

    def run_all(self, limit: float = float("inf")) -> None:
        """Run callbacks until none is left (or the next is past ``limit``)."""
        while (due := self.next_due()) is not None and due <= limit:
            self.run_until(due)

    @property
    def pending(self) -> int:
        return sum(1 for _, _, t in self._queue if not t.cancelled)
