"""Plain-Python statistics the core keeps; ``gateway.metrics`` exports them at scrape time.

Counting with attribute increments (instead of calling a metrics library on the hot path) keeps
admission cheap. Time-weighted ("timing") histograms are fed from the seconds spent in each
joint state (``segments.py``): the queue set credits them on every change and the histograms are
folded from those totals when read, so the hot path pays one credit, not several observations.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

# Bucket boundaries, exactly as kubernetes/apiserver pkg/util/flowcontrol/metrics.
QUEUE_LENGTH_BUCKETS = (0, 10, 25, 50, 100, 250, 500, 1000)
DURATION_BUCKETS = (0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30)
WATCH_COUNT_BUCKETS = (0, 1, 10, 100, 1000, 10000)
WORK_SEATS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 100)
SEAT_UTILIZATION_BUCKETS = (0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1)
REQUEST_UTILIZATION_BUCKETS = (0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.25, 0.5, 0.75, 1)
READ_WRITE_BUCKETS = (0, 0.001, 0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1)
DEMAND_SEATS_BUCKETS = (0.2, 0.4, 0.6, 0.8, 1, 1.2, 1.4, 1.7, 2, 2.8, 4, 6)

REJECT_REASONS = ("queue-full", "concurrency-limit", "time-out", "cancelled")


class Histogram:
    """Cumulative-at-export histogram: ``counts[i]`` holds observations in (b[i-1], b[i]]."""

    __slots__ = ("buckets", "count", "counts", "first_bound", "second_bound", "sum")

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(float(b) for b in buckets)
        # Missing bounds act as +Inf: every value then falls into the first bucket past the end.
        self.first_bound = self.buckets[0] if self.buckets else math.inf
        self.second_bound = self.buckets[1] if len(self.buckets) > 1 else math.inf
        self.counts = [0.0] * (len(self.buckets) + 1)  # last slot: +Inf
        self.sum = 0.0
        self.count = 0.0

    def observe(self, value: float, weight: float = 1.0) -> None:
        # bisect_left(buckets, value), testing the first two bounds first: most observations
        # land there, and compiled, those tests compare unboxed floats where bisect compares
        # objects. ``not bound < value`` is bisect's own test (a NaN lands at 0 either way).
        # (kept: >= 1% of APF-on instructions, docs/performance.md.)
        if not self.first_bound < value:
            i = 0
        elif not self.second_bound < value:
            i = 1
        else:
            i = bisect_left(self.buckets, value)
        self.counts[i] += weight
        self.sum += value * weight
        self.count += weight

    def cumulative(self) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) pairs ending with +Inf, as Prometheus exposes them."""
        out = []
        total = 0.0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


class TimingHistogram(Histogram):
    """A variable tracked over time: each value is weighted by how long it held (seconds)."""

    __slots__ = ()

    def hold(self, value: float, seconds: float) -> None:
        if seconds > 0:
            self.observe(value, seconds)


class FlowStats:
    """Counters for one (priority level, flow schema) pair."""

    __slots__ = (
        "dispatched",
        "executing_requests",
        "executing_seats",
        "execution_seconds",
        "inqueue_requests",
        "inqueue_seats",
        "no_accommodation",
        "queue_length_after_enqueue",
        "rejected",
        "wait_seconds",
        "watch_count_samples",
        "work_estimated_seats",
    )

    def __init__(self) -> None:
        self.dispatched = 0
        self.rejected = dict.fromkeys(REJECT_REASONS, 0)
        self.inqueue_requests = 0
        self.inqueue_seats = 0
        self.executing_requests = 0
        self.executing_seats = 0
        self.no_accommodation = 0
        self.queue_length_after_enqueue = Histogram(QUEUE_LENGTH_BUCKETS)
        # label execute="true"/"false"
        self.wait_seconds = {
            "true": Histogram(DURATION_BUCKETS),
            "false": Histogram(DURATION_BUCKETS),
        }
        # label type="regular"/"watch"
        self.execution_seconds = {
            "regular": Histogram(DURATION_BUCKETS),
            "watch": Histogram(DURATION_BUCKETS),
        }
        self.watch_count_samples = Histogram(WATCH_COUNT_BUCKETS)
        self.work_estimated_seats = Histogram(WORK_SEATS_BUCKETS)


class TimeIntegrator:
    """Time-weighted average, standard deviation and extremes of a variable (seat demand)."""

    __slots__ = ("duration", "integral", "max", "min", "sq_integral", "value")

    def __init__(self, value: float = 0.0) -> None:
        self.value = value
        self.duration = 0.0
        self.integral = 0.0
        self.sq_integral = 0.0
        self.min = value
        self.max = value

    def hold(self, value: float, seconds: float) -> None:
        """``value`` held for ``seconds`` (it is the current value from now on)."""
        if seconds > 0:
            self.duration += seconds
            self.integral += value * seconds
            self.sq_integral += value * value * seconds
        self.value = value
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    def set(self, value: float) -> None:
        self.value = value
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    def results(self) -> tuple[float, float, float, float, float]:
        """(duration, average, stdev, min, max); stdev is 0 when rounding makes it negative."""
        if self.duration <= 0:
            return (0.0, 0.0, 0.0, self.min, self.max)
        avg = self.integral / self.duration
        var = self.sq_integral / self.duration - avg * avg
        return (self.duration, avg, var**0.5 if var > 0 else 0.0, self.min, self.max)

    def reset(self) -> tuple[float, float, float, float, float]:
        out = self.results()
        self.duration = self.integral = self.sq_integral = 0.0
        self.min = self.max = self.value
        return out
