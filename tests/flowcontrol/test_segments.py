"""Time at each count (``CountTimes``): what the time-weighted histograms are folded from.
Small counts live in a list, large and negative ones in a dict; the statistics are the same."""

from __future__ import annotations

import pytest

from gateway.flowcontrol import bootstrap
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.kinds import RequestKindTracker
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.queueset import EXECUTING, QueueSet
from gateway.flowcontrol.stats import CountTimes, FlowStats
from gateway.testing import FakeEventClock

BIG = (1 << 16) + 3  # beyond the list: kept in the dict


@pytest.mark.parametrize("values", [[0, 3, 1, 3], [BIG, 2, -1, BIG], [5, 5, 0]])
def test_count_times_totals_per_value(values: list[int]) -> None:
    t = CountTimes(10.0, values[0])
    expected: dict[int, float] = {}
    at = 10.0
    for i, value in enumerate(values[1:], start=1):
        expected[values[i - 1]] = expected.get(values[i - 1], 0.0) + float(i)
        at += i
        t.change(value, at)
    expected[values[-1]] = expected.get(values[-1], 0.0) + 0.5
    assert sorted(t.drain(at + 0.5)) == sorted(expected.items())
    assert t.drain(at + 0.5) == []  # drained: counting starts again from zero
    t.change(values[-1], at + 2.5)
    assert t.drain(at + 2.5) == [(values[-1], 2.0)]


def test_count_times_credits_no_time_backwards() -> None:
    t = CountTimes(5.0, 1)
    t.change(2, 4.0)  # a reading older than the last change holds no time
    assert t.value == 2 and t.drain(6.0) == [(2, 1.0)]


def test_queue_set_time_at_counts_beyond_the_list() -> None:
    clock = FakeEventClock(start=10.0)
    qs = QueueSet("x", clock, desired_num_queues=-1, concurrency_limit=1 << 20)
    req = qs.start_request(WorkEstimate(BIG + 5), 0, FlowStats(), "fs")
    assert req.state == EXECUTING
    clock.advance(2.0)
    qs.sync_time()
    qs.finish(req)
    clock.advance(1.0)
    qs.sync_time()
    qs.note_counts(qs.last_real_time)
    assert sorted(qs.seats_times.drain(qs.last_real_time)) == [(0, 1.0), (BIG + 5, 2.0)]
    assert sorted(qs.executing_times.drain(qs.last_real_time)) == [(0, 1.0), (1, 2.0)]


def test_level_fold_at_small_and_large_counts() -> None:
    config = next(pl for pl in bootstrap.defaults().priority_levels if pl.name == "exempt")
    clock = FakeEventClock(start=10.0)
    level = PriorityLevel(config, clock, estimated_service=0.003)
    level.set_limits(1 << 20, 245)
    qs = level.qs
    den = qs.concurrency_denominator
    stats = FlowStats()
    wide = qs.start_request(WorkEstimate(BIG + 5), 0, stats, "fs")
    clock.advance(2.0)
    narrow = qs.start_request(WorkEstimate(3), 0, stats, "fs")
    clock.advance(0.5)
    qs.finish(wide)
    clock.advance(4.0)
    qs.finish(narrow)
    level.sync()
    seats = [(BIG + 5, 2.0), (BIG + 8, 0.5), (3, 4.0)]
    assert level.seat_utilization.sum == pytest.approx(sum(s / den * dt for s, dt in seats))
    assert level.seat_utilization.count == 6.5
    executing = level.request_utilization["executing"]
    assert executing.sum == pytest.approx(1 / den * 2.0 + 2 / den * 0.5 + 1 / den * 4.0)
    assert qs.demand.integral == pytest.approx(sum(s * dt for s, dt in seats))


def test_kind_counts_beyond_the_list() -> None:
    clock = FakeEventClock(start=100.0)
    kinds = RequestKindTracker(clock)
    kinds.set_denominators(waiting=1, executing=1 << 20)
    kinds.add("waiting", False, 2)
    kinds.add("executing", True, BIG + 1)  # the count leaves the list ...
    clock.advance(1.0)
    kinds.add("executing", True, -BIG)  # ... and returns to it
    clock.advance(2.0)
    kinds.add("waiting", False, -1)
    clock.advance(4.0)
    kinds.sync()
    ro = kinds.ratio["executing", "readOnly"]
    assert ro.count == 7.0
    assert ro.sum == pytest.approx((BIG + 1) / (1 << 20) * 1.0 + 1 / (1 << 20) * 6.0)
    mut_wait = kinds.ratio["waiting", "mutating"]
    assert mut_wait.sum == 2.0 * 1.0 + 2.0 * 2.0 + 1.0 * 4.0
    assert kinds.ratio["waiting", "readOnly"].sum == 0.0
    assert kinds.ratio["executing", "mutating"].sum == 0.0
