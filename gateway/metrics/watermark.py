"""The maximum of a count over the last completed one-second window.

kube-apiserver reports ``apiserver_current_inflight_requests`` and
``apiserver_current_inqueue_requests`` this way: a scrape sees the peak of the second that just
ended, not a subsampled instant. Windows roll lazily on every change and read.
"""

from __future__ import annotations

from collections.abc import Callable

WINDOW = 1.0


class Watermark:
    __slots__ = ("_high", "_last", "_now", "_start", "current")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.current = 0
        self._high = 0
        self._last = 0
        self._start = now()

    def _roll(self) -> None:
        now = self._now()
        elapsed = now - self._start
        if elapsed < WINDOW:
            return
        # More than one window without change: the last full window saw only ``current``.
        self._last = self._high if elapsed < 2 * WINDOW else self.current
        self._high = self.current
        self._start = now - (elapsed % WINDOW)

    def add(self, delta: int) -> None:
        self._roll()
        self.current += delta
        self._high = max(self._high, self.current)

    def value(self) -> int:
        self._roll()
        return self._last
