"""Server-wide request counts by kind (``readOnly`` / ``mutating``), as kube-apiserver exports
them: the previous second's high watermark of executing and waiting requests, and the
time-weighted ``read_vs_write_current_requests`` ratio histograms.

On the hot path ``add`` only adds the elapsed time to the current state's total; the
histograms are folded from those totals when read (``sync``) or when a limit changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gateway.clock import Clock
from gateway.flowcontrol.segments import Segments
from gateway.flowcontrol.stats import READ_WRITE_BUCKETS, TimingHistogram
from gateway.flowcontrol.watermark import Watermark

KINDS: Final = ("readOnly", "mutating")
PHASES: Final = ("waiting", "executing")
# Index of each (phase, kind) in the state (and its field in the state's segment key).
_SLOTS: Final = {(phase, kind): i for i, (phase, kind) in enumerate(
    (p, k) for p in PHASES for k in KINDS
)}  # fmt: skip
# add() computes the slot as base + (0 read-only, 1 mutating): no tuple key on the hot path.
_WAITING_BASE: Final = 0
_EXECUTING_BASE: Final = 2
_BASES: Final = (("waiting", _WAITING_BASE), ("executing", _EXECUTING_BASE))
assert set(PHASES) == {phase for phase, _ in _BASES}
assert all(
    _SLOTS[phase, "readOnly"] == base and _SLOTS[phase, "mutating"] == base + 1
    for phase, base in _BASES
)


class RequestKindTracker:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._now: Callable[[], float] = clock.now  # bound once (no look-ups per read)
        self.marks = {key: Watermark() for key in _SLOTS}
        self._marks = [self.marks[key] for key in _SLOTS]
        self.ratio = {key: TimingHistogram(READ_WRITE_BUCKETS) for key in _SLOTS}
        self.denominators = {"waiting": 1.0, "executing": 1.0}
        self.last = clock.now()
        self._second = int(self.last)
        for mark in self._marks:
            mark.window = self._second
        # The current state's key in ``_segments``: its four counts in _SLOTS order.
        self._segments = Segments()
        self._segments.on_full = self._fold
        self._key = self._segments.key(0, 0, 0, 0)

    def _advance(self) -> float:
        """Credit the time since the last change to the state that held during it."""
        now = self._now()
        dt = now - self.last
        if dt > 0:
            self._segments.credit(self._key, dt)
            self.last = now
            second = int(now)
            if second != self._second:
                self._second = second
                for mark in self._marks:
                    mark.roll(second)
        return now

    def add(self, phase: str, read_only: bool, delta: int) -> None:
        self._advance()
        # The phase's base slot, without a dict look-up (a KeyError for another phase;
        # kept under 1% for the APF on/off target, docs/performance.md).
        if phase == "executing":
            base = _EXECUTING_BASE
        elif phase == "waiting":
            base = _WAITING_BASE
        else:
            raise KeyError(phase)
        slot = base + (0 if read_only else 1)
        ms = self._marks
        ms[slot].add(delta)
        self._key = self._segments.key(ms[0].current, ms[1].current, ms[2].current, ms[3].current)

    def _fold(self) -> None:
        dens = [self.denominators[phase] for phase, _ in _SLOTS]
        hists = [self.ratio[key] for key in _SLOTS]
        for state, seconds in self._segments.take():
            for value, den, hist in zip(state, dens, hists, strict=True):
                hist.hold(value / den, seconds)

    def set_denominators(self, waiting: float, executing: float) -> None:
        self.sync()
        self.denominators = {"waiting": max(1.0, waiting), "executing": max(1.0, executing)}

    def sync(self) -> None:
        second = int(self._advance())
        for mark in self._marks:
            mark.roll(second)  # a second with no change at all still closes its window
        self._fold()

    def watermark(self, phase: str, kind: str) -> int:
        return self.marks[phase, kind].reported
