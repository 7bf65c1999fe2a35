"""State segments: small states pack into one int key, others get an id of their own; the
statistics folded from them are the same either way, and the memoized neighbour links never
change where time is credited."""

from __future__ import annotations

import random

import pytest

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.kinds import RequestKindTracker
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.queueset import EXECUTING, QueueSet
from gateway.flowcontrol.segments import MAX_SEGMENTS, Segment, Segments, State
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock

BIG = 1 << 15  # the first count that does not fit a packed field


@pytest.mark.parametrize(
    "state",
    [(0, 0, 0, 0), (1, 2, 3, 4), (BIG - 1,) * 4, (BIG, 0, 0, 0), (0, 0, 0, BIG),
     (5, BIG * 3, 1, 0), (-1, 0, 0, 0), (0, 0, -2, 7)],
)  # fmt: skip
def test_segment_key_round_trips(state: tuple[int, int, int, int]) -> None:
    segments = Segments()
    key = segments.key(*state)
    assert segments.state(key) == state
    assert segments.key(*state) == key  # the same state, the same key
    packed = all(0 <= v < BIG for v in state)
    assert (key >= 0) == packed


def test_distinct_states_have_distinct_keys() -> None:
    segments = Segments()
    states = [(a, b, c, d) for a in (0, 1, BIG - 1, BIG) for b in (0, 1, BIG)
              for c in (0, BIG - 1) for d in (0, 2, BIG)]  # fmt: skip
    assert len({segments.key(*s) for s in states}) == len(states)


def test_credits_follow_the_key_whatever_the_links() -> None:
    rng = random.Random(7)
    segments = Segments()
    expected: dict[State, float] = {}
    state = [0, 0, 0, 0]
    for _ in range(5000):  # a random walk, mostly one step at a time, sometimes a jump
        slot = rng.randrange(4)
        state[slot] = max(0, state[slot] + rng.choice((-1, 1, 1, -1, 5, -5)))
        if rng.random() < 0.01:
            state[0] += BIG  # leaves the packed form
        dt = rng.choice((0.25, 0.5, 1.0))
        key = segments.key(*state)
        segments.credit(key, dt)
        expected[tuple(state)] = expected.get(tuple(state), 0.0) + dt  # type: ignore[index]
    assert segments.totals() == expected
    assert dict(segments.take()) == expected
    assert segments.totals() == {}  # taken


def test_neighbour_links_are_used_under_steady_load() -> None:
    segments = Segments()
    keys = [segments.key(n, n, 0, 0) for n in (0, 1, 2, 1, 0, 1, 2, 3, 2)]
    for key in keys:
        segments.credit(key, 1.0)
    made = {id(s) for s in segments._by_key.values()}
    for key in keys:  # the same walk again: every step follows a link, no new node
        segments.credit(key, 1.0)
    assert {id(s) for s in segments._by_key.values()} == made
    one = segments._by_key[segments.key(1, 1, 0, 0)]
    assert isinstance(one.up, Segment) and one.up.key == segments.key(2, 2, 0, 0)
    assert isinstance(one.down, Segment) and one.down.key == segments.key(0, 0, 0, 0)


def test_too_many_states_fold_and_are_forgotten() -> None:
    segments = Segments()
    taken: list[tuple[State, float]] = []
    segments.on_full = lambda: taken.extend(segments.take())
    for n in range(MAX_SEGMENTS + 10):
        segments.credit(segments.key(n, 0, 0, 0), 1.0)
    # The fold came when the state number MAX_SEGMENTS appeared, before it was credited.
    assert len(taken) == MAX_SEGMENTS - 1
    assert len(segments._by_key) == 11  # the current state then the ten after it
    taken.extend(segments.take())
    assert sorted(taken) == [((n, 0, 0, 0), 1.0) for n in range(MAX_SEGMENTS + 10)]


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
    assert qs.segments.totals() == {(BIG + 5, 1, 0, 0): 2.0, (0, 0, 0, 0): 1.0}


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


class _Subclass(QueueSet):
    """Interpreted, as tests' reference queue sets are: compiled code then calls its methods
    through Python, where mypyc once lost a float default argument (0.0 instead of the clock)."""


@pytest.mark.parametrize("cls", [QueueSet, _Subclass])
def test_start_and_finish_read_the_clock_in_subclasses_too(cls: type[QueueSet]) -> None:
    clock = FakeEventClock(start=10.0)
    qs = cls("x", clock, desired_num_queues=-1, concurrency_limit=10)
    clock.advance(1.0)
    req = qs.start_request(WorkEstimate(1), 0, FlowStats(), "fs")
    assert (req.arrival_time, qs.last_real_time) == (11.0, 11.0)
    clock.advance(2.0)
    qs.finish(req)
    assert qs.last_real_time == 13.0
    assert qs.segments.totals() == {(0, 0, 0, 0): 1.0, (1, 1, 0, 0): 2.0}


def test_seat_seconds_integrate_seats_across_a_limit_change() -> None:
    """The mean seats over a window is Δseat_seconds / Δt, even when borrowing moves the limit
    that ``seat_utilization`` divides by (its sum times any one limit would be wrong)."""
    config = next(pl for pl in bootstrap.defaults().priority_levels if pl.name == "exempt")
    clock = FakeEventClock(start=10.0)
    level = PriorityLevel(config, clock, estimated_service=0.003)
    level.set_limits(100, 245)
    stats = FlowStats()
    req = level.qs.start_request(WorkEstimate(3), 0, stats, "fs")
    clock.advance(2.0)
    level.sync()
    assert level.seat_seconds == 6.0
    level.set_limits(50, 245)  # a new denominator for the utilization histogram
    clock.advance(1.0)
    level.qs.finish(req)
    clock.advance(5.0)
    level.sync()
    assert level.seat_seconds == 9.0  # 3 seats for 3 s, then none
    assert level.seat_utilization.count == 8.0
