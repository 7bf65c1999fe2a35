"""Borrowing: every adjustment period, move seats between priority levels (Kubernetes
``updateBorrowingLocked``), following each level's recent seat demand within its lendable
and borrowing bounds.

Each level's demand statistics (average + standard deviation over the period, smoothed with
coefficient 0.977, and the period's high watermark) set its target; exempt levels keep what
they used; limited levels share the rest by solving the fair allocation problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.clock import EventClock, Timer
from gateway.flowcontrol.conc_alloc import AllocationError, AllocItem, compute_allocation
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.seats import round_half_up

ADJUSTMENT_PERIOD = 10.0
SMOOTHING_COEFFICIENT = 0.977


@dataclass(frozen=True, slots=True)
class LimitsSnapshot:
    """One level's limits after one adjustment (what ``simulate`` shows over time)."""

    time: float
    nominal_cl: int
    lower_cl: int
    upper_cl: int
    current_cl: int
    demand_avg: float
    demand_stdev: float
    demand_high_watermark: int
    smoothed: float
    target: float


def update_demand_stats(level: PriorityLevel) -> None:
    level.sync()
    duration, avg, stdev, _, high = level.qs.demand.reset()
    level.high_watermark = round_half_up(high)
    if duration <= 0:
        return
    level.demand_avg = avg
    level.demand_stdev = stdev
    envelope = avg + stdev
    level.smoothed = max(
        envelope, SMOOTHING_COEFFICIENT * level.smoothed + (1 - SMOOTHING_COEFFICIENT) * envelope
    )


def update_borrowing(levels: list[PriorityLevel], nominal_cl_sum: int) -> float:
    """Recompute every level's current limit; returns the fair proportion (0 if constrained)."""
    for level in levels:
        update_demand_stats(level)
    remaining = nominal_cl_sum
    limited: list[PriorityLevel] = []
    items: list[AllocItem] = []
    for level in levels:
        if level.exempt:
            level.current_cl = max(level.min_cl, level.high_watermark)
            level.target = float(level.current_cl)
            remaining -= level.current_cl
            continue
        min_current = max(level.min_cl, min(level.nominal_cl, level.high_watermark))
        level.target = max(float(min_current), level.smoothed)
        limited.append(level)
        items.append(AllocItem(float(min_current), float(level.max_cl), level.target))
    min_sum = sum(level.min_cl for level in limited)
    min_current_sum = sum(int(item.lower) for item in items)
    fair_frac = 0.0
    if remaining <= min_sum:
        for level in limited:
            level.current_cl = level.min_cl
    elif remaining <= min_current_sum:
        share = (remaining - min_sum) / (min_current_sum - min_sum)
        for level, item in zip(limited, items, strict=True):
            level.current_cl = level.min_cl + round_half_up((item.lower - level.min_cl) * share)
    else:
        try:
            # As Kubernetes: the whole nominal sum, not what the exempt levels left.
            allocs, fair_frac = compute_allocation(nominal_cl_sum, items)
        except AllocationError:
            allocs = [float(level.current_cl or 0) for level in limited]
        for level, alloc in zip(limited, allocs, strict=True):
            level.current_cl = round_half_up(alloc)
    for level in levels:
        level.apply_current_limit()
    return fair_frac


def check_period(period: float) -> None:
    if not period > 0:  # NaN too
        raise ValueError("the borrowing adjustment period must be positive")


class Borrower(Protocol):
    """What the adjuster drives: ``controller.FlowController`` (which calls ``update_borrowing``
    above, so this module cannot import it)."""

    @property
    def levels(self) -> Mapping[str, PriorityLevel]: ...

    def update_borrowing(self) -> None: ...


class BorrowingAdjuster:
    """Runs ``update_borrowing`` every ``period`` seconds of the controller's event clock.

    Its owner (``FlowControlMiddleware``, the one that runs the controller) starts, stops and
    reconfigures it; nothing else touches its timer."""

    def __init__(
        self,
        controller: Borrower,
        clock: EventClock,
        *,
        period: float = ADJUSTMENT_PERIOD,
        keep_history: bool = False,
    ) -> None:
        check_period(period)
        self.controller = controller
        self.clock = clock
        self.period = period
        self.keep_history = keep_history
        self.history: dict[str, list[LimitsSnapshot]] = {}
        self._timer: Timer | None = None

    def start(self) -> None:
        if self._timer is None:
            self._timer = self.clock.call_later(self.period, self._tick)

    @property
    def running(self) -> bool:
        return self._timer is not None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def reconfigure(self, period: float) -> None:
        """A new period; a running adjuster restarts its timer on it, a stopped one stays
        stopped. Raises ``ValueError`` before changing anything."""
        check_period(period)
        if period == self.period:
            return
        running = self.running
        self.stop()
        self.period = period
        if running:
            self.start()

    def _tick(self) -> None:
        self._timer = self.clock.call_later(self.period, self._tick)
        self.controller.update_borrowing()
        if self.keep_history:
            self.record()

    def record(self) -> None:
        now = self.clock.now()
        for name, level in self.controller.levels.items():
            self.history.setdefault(name, []).append(
                LimitsSnapshot(
                    time=now,
                    nominal_cl=level.nominal_cl,
                    lower_cl=level.min_cl,
                    upper_cl=level.max_cl,
                    current_cl=level.current_cl or 0,
                    demand_avg=level.demand_avg,
                    demand_stdev=level.demand_stdev,
                    demand_high_watermark=level.high_watermark,
                    smoothed=level.smoothed,
                    target=level.target,
                )
            )
