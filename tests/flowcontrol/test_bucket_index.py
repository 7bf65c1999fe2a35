"""Histograms count each observation in bucket ``bisect_left(buckets, value)`` (their fast
path tests the first buckets first), for every bucket layout the statistics use."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.flowcontrol import stats
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import QueueSet
from gateway.flowcontrol.stats import FlowStats, Histogram
from gateway.testing import FakeEventClock


def bucket_index(buckets: tuple[float, ...], value: float) -> int:
    h = Histogram(buckets)
    h.observe(value)
    assert h.count == 1.0
    (i,) = (i for i, n in enumerate(h.counts) if n)
    return i


LAYOUTS = [
    stats.QUEUE_LENGTH_BUCKETS, stats.DURATION_BUCKETS, stats.WATCH_COUNT_BUCKETS,
    stats.WORK_SEATS_BUCKETS, stats.SEAT_UTILIZATION_BUCKETS,
    stats.REQUEST_UTILIZATION_BUCKETS, stats.READ_WRITE_BUCKETS, stats.DEMAND_SEATS_BUCKETS,
]  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_boundary_and_its_neighbours(layout: tuple[float, ...]) -> None:
    buckets = Histogram(layout).buckets
    values = [-math.inf, -1.0, math.inf, math.nan, 0.0, -0.0]
    for b in buckets:
        values += [b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
    for v in values:
        assert bucket_index(buckets, v) == bisect_left(buckets, v), v


@given(st.sampled_from(LAYOUTS), st.floats(allow_nan=True, allow_infinity=True))
def test_any_value(layout: tuple[float, ...], value: float) -> None:
    buckets = Histogram(layout).buckets
    assert bucket_index(buckets, value) == bisect_left(buckets, value)


@pytest.mark.parametrize("layout", [(), (2.0,), (0.0, 1.0)])
def test_short_layouts(layout: tuple[float, ...]) -> None:
    for v in (-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.nan):
        assert bucket_index(layout, v) == bisect_left(layout, v), v


@given(st.integers(min_value=1, max_value=300))
def test_work_estimated_seats(seats: int) -> None:
    qs = QueueSet("x", FakeEventClock(), desired_num_queues=-1, concurrency_limit=1000)
    stats_ = FlowStats()
    qs.start_request(WorkEstimate(seats), 0, stats_, "fs")
    h = stats_.work_estimated_seats
    assert h.counts[bisect_left(h.buckets, seats)] == 1 and h.count == 1 and h.sum == seats
