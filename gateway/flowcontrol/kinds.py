"""Server-wide request counts by kind (``readOnly`` / ``mutating``), as kube-apiserver exports
them: the previous second's high watermark of executing and waiting requests, and the
time-weighted ``read_vs_write_current_requests`` ratio histograms.
"""

from __future__ import annotations

import math

from gateway.flowcontrol.clock import Clock
from gateway.flowcontrol.stats import READ_WRITE_BUCKETS, TimingHistogram

KINDS = ("readOnly", "mutating")
PHASES = ("waiting", "executing")


class _Watermark:
    __slots__ = ("current", "reported", "window", "window_max")

    def __init__(self) -> None:
        self.current = 0
        self.window = 0
        self.window_max = 0
        self.reported = 0

    def roll(self, second: int) -> None:
        if second > self.window:
            # The window just closed reports its maximum; an idle gap reports the current value.
            self.reported = self.window_max if second == self.window + 1 else self.current
            self.window = second
            self.window_max = self.current


class RequestKindTracker:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.marks = {(phase, kind): _Watermark() for phase in PHASES for kind in KINDS}
        self.ratio = {
            (phase, kind): TimingHistogram(READ_WRITE_BUCKETS) for phase in PHASES for kind in KINDS
        }
        self.denominators = {"waiting": 1.0, "executing": 1.0}
        self.last = clock.now()

    def _advance(self) -> int:
        now = self.clock.now()
        dt = now - self.last
        if dt > 0:
            for (phase, kind), mark in self.marks.items():
                self.ratio[phase, kind].hold(mark.current / self.denominators[phase], dt)
            self.last = now
        return math.floor(now)

    def add(self, phase: str, read_only: bool, delta: int) -> None:
        second = self._advance()
        mark = self.marks[phase, "readOnly" if read_only else "mutating"]
        mark.roll(second)
        mark.current += delta
        mark.window_max = max(mark.window_max, mark.current)

    def set_denominators(self, waiting: float, executing: float) -> None:
        self.sync()
        self.denominators = {"waiting": max(1.0, waiting), "executing": max(1.0, executing)}

    def sync(self) -> None:
        second = self._advance()
        for mark in self.marks.values():
            mark.roll(second)

    def watermark(self, phase: str, kind: str) -> int:
        return self.marks[phase, kind].reported
