"""State segment keys: small states pack into one int, others keep their tuple; the statistics
folded from them are the same either way."""

from __future__ import annotations

import pytest

from gateway.flowcontrol import bootstrap
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.kinds import RequestKindTracker
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.queueset import EXECUTING, QueueSet, segment_key, segment_state
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock

BIG = 1 << 15  # the first count that does not fit a packed field


@pytest.mark.parametrize(
    "state",
    [(0, 0, 0, 0), (1, 2, 3, 4), (BIG - 1,) * 4, (BIG, 0, 0, 0), (0, 0, 0, BIG),
     (5, BIG * 3, 1, 0), (-1, 0, 0, 0), (0, 0, -2, 7)],
)  # fmt: skip
def test_segment_key_round_trips(state: tuple[int, int, int, int]) -> None:
    key = segment_key(*state)
    assert segment_state(key) == state
    packed = all(0 <= v < BIG for v in state)
    assert isinstance(key, int) == packed


def test_distinct_states_have_distinct_keys() -> None:
    states = [(a, b, c, d) for a in (0, 1, BIG - 1, BIG) for b in (0, 1, BIG)
              for c in (0, BIG - 1) for d in (0, 2, BIG)]  # fmt: skip
    assert len({segment_key(*s) for s in states}) == len(states)


def test_queue_set_segments_beyond_a_packed_field() -> None:
    clock = FakeEventClock(start=10.0)
    qs = QueueSet("x", clock, desired_num_queues=-1, concurrency_limit=100_000)
    req = qs.start_request(WorkEstimate(BIG + 5), 0, FlowStats(), "fs")
    assert req.state == EXECUTING
    clock.advance(2.0)
    qs.sync_time()
    qs.finish(req)
    clock.advance(1.0)
    qs.sync_time()
    assert qs.segments == {(BIG + 5, 1, 0, 0): 2.0, 0: 1.0}


def test_level_fold_decodes_packed_and_tuple_keys() -> None:
    config = next(pl for pl in bootstrap.defaults().priority_levels if pl.name == "exempt")
    clock = FakeEventClock(start=10.0)
    level = PriorityLevel(config, clock, estimated_service=0.003)
    level.set_limits(100_000, 245)
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
    assert level.seat_utilization.sum == sum(s / den * dt for s, dt in seats)
    assert level.seat_utilization.count == 6.5
    executing = level.request_utilization["executing"]
    assert executing.sum == 1 / den * 2.0 + 2 / den * 0.5 + 1 / den * 4.0
    assert qs.demand.integral == sum(s * dt for s, dt in seats)


def test_kind_counts_beyond_a_packed_field() -> None:
    clock = FakeEventClock(start=100.0)
    kinds = RequestKindTracker(clock)
    kinds.set_denominators(waiting=1, executing=100_000)
    kinds.add("waiting", False, 2)
    kinds.add("executing", True, BIG + 1)  # the key leaves the packed form ...
    clock.advance(1.0)
    kinds.add("executing", True, -BIG)  # ... and returns to it
    clock.advance(2.0)
    kinds.add("waiting", False, -1)
    clock.advance(4.0)
    kinds.sync()
    ro = kinds.ratio["executing", "readOnly"]
    assert ro.count == 7.0
    assert ro.sum == (BIG + 1) / 100_000 * 1.0 + 1 / 100_000 * 2.0 + 1 / 100_000 * 4.0
    mut_wait = kinds.ratio["waiting", "mutating"]
    assert mut_wait.sum == 2.0 * 1.0 + 2.0 * 2.0 + 1.0 * 4.0
    assert kinds.ratio["waiting", "readOnly"].sum == 0.0
    assert kinds.ratio["executing", "mutating"].sum == 0.0
