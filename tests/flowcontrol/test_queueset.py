"""Queue-set unit tests mirroring Kubernetes' queueset_test.go, in fake time."""

from __future__ import annotations

import pytest

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import (
    EXECUTING,
    FINISHED,
    REJECTED,
    WAITING,
    QueueSet,
    Request,
)
from gateway.flowcontrol.seats import seats_times_duration
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock
from tests.flowcontrol.scenario import Client, Scenario, make_qs, within

W1 = WorkEstimate(1)


def start(qs: QueueSet, hash_value: int = 0, work: WorkEstimate = W1, **kw: object) -> Request:
    stats = kw.pop("stats", None) or FlowStats()
    assert isinstance(stats, FlowStats)
    return qs.start_request(work, hash_value, stats, "fs", **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- cancellation / timeout
def test_context_cancel_time_out() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 11, 11, 1, 1)
    stats = FlowStats()
    req1 = start(qs, 1, stats=stats)
    assert req1.state == EXECUTING
    decided: list[int] = []
    req2 = start(qs, 2, stats=stats, wait_deadline=clock.now() + 1.0)
    req2.on_decided = lambda r: decided.append(r.state)
    assert req2.state == WAITING
    assert (qs.tot_requests_waiting, stats.inqueue_requests) == (1, 1)
    clock.advance(0.999)
    assert req2.state == WAITING
    clock.advance(0.001)
    assert clock.now() == 1.0
    assert req2.state == REJECTED and req2.reason == "time-out"
    assert decided == [REJECTED]
    assert stats.rejected["time-out"] == 1
    assert (qs.rejected, qs.cancelled) == (1, 1)
    assert (qs.tot_requests_waiting, qs.tot_seats_waiting, stats.inqueue_requests) == (0, 0, 0)
    qs.finish(req1)
    clock.run_all()
    assert req2.state == REJECTED  # never executes
    assert qs.dispatched == 1 and qs.is_idle
    assert qs.tot_seats_in_use == 0


def test_cancel_records_reason_and_is_idempotent() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    stats = FlowStats()
    running = start(qs, stats=stats)
    waiting = start(qs, 1, stats=stats, wait_deadline=5.0)
    assert qs.cancel(waiting, "cancelled")
    assert not qs.cancel(waiting, "cancelled")
    assert not qs.cancel(running, "cancelled")  # executing requests cannot be cancelled
    assert waiting.reason == "cancelled" and stats.rejected["cancelled"] == 1
    clock.run_all()  # the wait timer was cancelled with the request
    assert stats.rejected["time-out"] == 0
    qs.finish(running)
    assert qs.is_idle and qs.tot_seats_in_use == 0 and qs.active_queues == 0


def test_dispatch_cancels_wait_timer() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    running = start(qs)
    waiting = start(qs, 1, wait_deadline=10.0)
    clock.advance(1.0)
    qs.finish(running)
    assert waiting.state == EXECUTING
    clock.advance(20.0)
    assert waiting.state == EXECUTING and waiting.reason == ""


# ---------------------------------------------------------------- dispatch choice
def test_lower_finish_r_wins() -> None:
    """A queue that was just served has a later virtual start than one that waited."""
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    a1 = start(qs, 0)
    a2 = start(qs, 0)  # queue 0, behind a1
    clock.advance(0.5)
    b1 = start(qs, 1)  # queue 1 arrives later in real time ...
    clock.advance(0.5)
    qs.finish(a1)
    # ... but queue 0 has already used 1 s of service: queue 1 goes first.
    assert b1.state == EXECUTING and a2.state == WAITING
    assert qs.robin_index == 1


def test_ties_go_round_robin() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    blocker = start(qs, 3)
    reqs = [start(qs, i) for i in (2, 0, 1)]  # equal finish R in queues 2, 0, 1
    order: list[int] = []
    for r in reqs:
        r.on_decided = lambda r: order.append(r.queue.index if r.queue else -9)
    assert qs.robin_index == 3
    qs.finish(blocker)
    for _ in range(3):
        running = next(r for r in reqs if r.state == EXECUTING)
        qs.finish(running)
    # Round-robin from just after queue 3: 0, 1, 2 (not arrival order 2, 0, 1).
    assert order == [0, 1, 2]


def test_no_accommodation_blocks_narrower_requests() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 8, 10, 1, 10)
    stats_x, stats_w, stats_n = FlowStats(), FlowStats(), FlowStats()
    x = start(qs, 0, WorkEstimate(5), stats=stats_x)
    assert x.state == EXECUTING and qs.tot_seats_in_use == 5
    wide = start(qs, 1, WorkEstimate(10), stats=stats_w)
    assert wide.state == WAITING
    assert stats_w.no_accommodation == 1
    clock.advance(1.0)  # R moves on: a newly active queue starts later in virtual time
    narrow = start(qs, 2, WorkEstimate(1), stats=stats_n)
    # The fair choice (wide) does not fit; nothing else is dispatched although narrow would fit.
    assert narrow.state == WAITING
    assert stats_w.no_accommodation == 2 and stats_n.no_accommodation == 0
    assert qs.tot_seats_in_use == 5
    qs.finish(x)
    assert wide.state == EXECUTING and narrow.state == WAITING
    assert qs.tot_seats_in_use == 10
    qs.finish(wide)
    assert narrow.state == EXECUTING


def test_too_wide_request_runs_alone() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 2)
    small = start(qs, 0)
    wide = start(qs, 1, WorkEstimate(5))
    assert wide.state == WAITING  # wider than the limit: waits until nothing executes
    qs.finish(small)
    assert wide.state == EXECUTING and qs.tot_seats_in_use == 5
    other = start(qs, 2)
    assert other.state == WAITING  # seats in use exceed the limit
    qs.finish(wide)
    assert other.state == EXECUTING and qs.tot_seats_in_use == 1


def test_final_seats_clipped_to_limit_keep_work() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 4)
    blocker = start(qs, 0)
    req = start(qs, 1, WorkEstimate(1, 8, 1.0))
    assert req.state == WAITING
    qs.finish(blocker)
    assert req.state == EXECUTING
    assert req.final_seats == 4
    assert req.additional_latency == pytest.approx(2.0)  # 8 seats x 1 s = 4 seats x 2 s
    # As Kubernetes: the request now holds max(initial, clipped final) seats, not 8.
    assert qs.tot_seats_in_use == 4 and qs.tot_seats_waiting == 0
    clock.advance(1.0)
    qs.finish(req)
    clock.advance(1.999)
    assert qs.tot_seats_in_use == 4
    clock.advance(0.001)
    assert qs.tot_seats_in_use == 0 and qs.is_idle


# ---------------------------------------------------------------- completion
def test_finish_holds_final_seats_for_additional_latency() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 20)
    stats = FlowStats()
    req = start(qs, 0, WorkEstimate(1, 10, 60.0), stats=stats)
    assert req.state == EXECUTING and qs.tot_seats_in_use == 10
    clock.advance(1.0)
    idle = qs.finish(req)
    assert idle  # no request is executing or waiting any more ...
    assert req.state == FINISHED
    assert qs.tot_requests_executing == 0 and stats.executing_requests == 0
    assert qs.tot_seats_in_use == 10 and stats.executing_seats == 10  # ... but seats are held
    clock.advance(59.999)
    assert qs.tot_seats_in_use == 10
    clock.advance(0.001)
    assert qs.tot_seats_in_use == 0 and stats.executing_seats == 0
    assert qs.queues[0].seats_in_use == 0


def test_finish_without_latency_releases_max_seats_at_once() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 20)
    req = start(qs, 0, WorkEstimate(10))
    assert qs.tot_seats_in_use == 10
    qs.finish(req)
    assert qs.tot_seats_in_use == 0 and clock.pending == 0


def test_held_final_seats_delay_next_dispatch() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 2)
    first = start(qs, 0, WorkEstimate(1, 2, 0.5))
    second = start(qs, 1)
    assert second.state == WAITING
    clock.advance(1.0)
    qs.finish(first)
    assert second.state == WAITING
    clock.advance(0.5)
    assert second.state == EXECUTING


def test_finish_corrects_virtual_start() -> None:
    """next_dispatch_r is charged G at dispatch and corrected to the real service time."""
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    req = start(qs, 0, WorkEstimate(2))  # too wide: runs alone
    queue = qs.queues[0]
    g = seats_times_duration(2, 0.003)
    assert queue.next_dispatch_r == g
    clock.advance(1.0)
    qs.finish(req)
    assert queue.next_dispatch_r == seats_times_duration(2, 1.0)


@pytest.mark.parametrize(
    ("initial", "final", "max_seats"), [(3, 3, 3), (1, 3, 3), (3, 1, 3), (1, 0, 1)]
)
def test_request_seats(initial: int, final: int, max_seats: int) -> None:
    assert WorkEstimate(initial, final, 1.0).max_seats == max_seats


def test_request_work() -> None:
    clock = FakeEventClock()
    qs = QueueSet(
        "pl",
        clock,
        desired_num_queues=1,
        queue_length_limit=10,
        hand_size=1,
        concurrency_limit=1,
        estimated_service=2.0,
    )
    req = start(qs, 0, WorkEstimate(3, 50, 70.0))
    assert req.total_work == (3 * 2 + 50 * 70) * 100_000_000
    assert req.final_work == 50 * 70 * 100_000_000


# ---------------------------------------------------------------- rejection
def test_queue_full_only_when_all_seats_in_use() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 1, 1, 1, 4)
    stats = FlowStats()
    drops: list[float] = []
    qs.on_reject = lambda: drops.append(clock.now())
    running = start(qs, 0, WorkEstimate(3), stats=stats)
    wide = start(qs, 0, WorkEstimate(4), stats=stats)  # cannot be accommodated: waits
    assert wide.state == WAITING and qs.queues[0].n_waiting == 1
    # The queue is at its length limit, but a seat is free: enqueued anyway.
    extra = start(qs, 0, stats=stats)
    assert extra.state == WAITING and qs.queues[0].n_waiting == 2
    qs.finish(running)
    assert wide.state == EXECUTING and qs.tot_seats_in_use == 4
    # All seats in use and the queue still holds one request (>= limit 1): rejected.
    rejected = start(qs, 0, stats=stats)
    assert rejected.state == REJECTED and rejected.reason == "queue-full"
    assert stats.rejected["queue-full"] == 1 and drops == [0.0]
    assert qs.queues[0].n_waiting == 1


def test_queue_length_limit_zero_rejects_when_busy() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 1, 0, 1, 1)
    assert start(qs).state == EXECUTING
    assert start(qs).reason == "queue-full"


def test_single_queue_is_fifo() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 1, 100, 1, 1)
    blocker = start(qs, 0)
    order: list[int] = []
    reqs = []
    for i, h in enumerate((5, 17, 3, 2**63, 9)):
        clock.advance(0.01)
        req = start(qs, h, WorkEstimate(1 + i % 2), descr=i)
        req.on_decided = lambda r: order.append(r.descr)
        reqs.append(req)
    qs.finish(blocker)
    while any(r.state == EXECUTING for r in reqs):
        qs.finish(next(r for r in reqs if r.state == EXECUTING))
    assert order == [0, 1, 2, 3, 4]


def test_reject_level_concurrency_limit() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 0, 0, 0, 2)
    stats = FlowStats()
    a, b = start(qs, stats=stats), start(qs, stats=stats)
    assert a.state == b.state == EXECUTING and a.queue is None
    c = start(qs, stats=stats)
    assert c.state == REJECTED and c.reason == "concurrency-limit"
    assert stats.rejected["concurrency-limit"] == 1 and qs.tot_requests_waiting == 0
    # request_wait_duration_seconds: both outcomes observed, as Kubernetes does on Reject levels.
    assert stats.wait_seconds["true"].count == 2 and stats.wait_seconds["false"].count == 1
    qs.finish(a)
    qs.finish(b)
    wide = start(qs, work=WorkEstimate(3))  # too wide, nothing executing: runs alone
    assert wide.state == EXECUTING
    assert start(qs).reason == "concurrency-limit"
    qs.finish(wide)
    assert qs.is_idle and qs.tot_seats_in_use == 0


def test_current_limit_zero_as_in_kubernetes() -> None:
    """Kubernetes' queue set at ConcurrencyLimit 0: a Reject level admits a request when nothing
    executes (``canAccommodateSeatsLocked``'s too-wide branch, issue #134196); a Queue level
    dispatches nothing (``dispatchAsMuchAsPossibleLocked`` needs seats in use < limit) until
    its limit is raised, which borrowing does at its next adjustment."""
    clock = FakeEventClock()
    reject = make_qs(clock, 0, 0, 0, 0)
    alone = start(reject)
    assert alone.state == EXECUTING
    assert start(reject).reason == "concurrency-limit"
    reject.finish(alone)
    assert start(reject).state == EXECUTING

    queued = make_qs(clock, 1, 10, 1, 0)
    waiting = start(queued)
    assert waiting.state == WAITING and queued.tot_requests_executing == 0
    queued.configure(desired_num_queues=1, queue_length_limit=10, hand_size=1, concurrency_limit=1)
    assert waiting.state == EXECUTING


def test_exempt_never_limited_but_counted() -> None:
    clock = FakeEventClock()
    qs = QueueSet("exempt", clock, desired_num_queues=-1, concurrency_limit=0)
    stats = FlowStats()
    reqs = [start(qs, i, WorkEstimate(1 + i % 3), stats=stats) for i in range(100)]
    assert all(r.state == EXECUTING for r in reqs)
    seats = sum(1 + i % 3 for i in range(100))
    assert qs.tot_seats_in_use == seats and stats.executing_seats == seats
    assert qs.tot_requests_executing == 100 and stats.dispatched == 100
    assert len(qs.executing_sans_queue) == 100
    for r in reqs:
        qs.finish(r)
    assert qs.tot_seats_in_use == 0 and qs.is_idle and stats.executing_requests == 0


# ---------------------------------------------------------------- separations (final seats)
@pytest.mark.parametrize(
    ("think", "pad", "final", "cl", "clients", "expected"),
    [
        (0.0, 0.0, 1, 1, 1, 1.0),
        (0.5, 0.0, 1, 1, 1, 1 / 1.5),
        (1.0, 0.0, 1, 1, 2, 0.5),
        (0.0, 1.0, 1, 1, 1, 0.5),  # the seat is held 1 s after each call
        (0.0, 1.0, 1, 1, 2, 0.25),
        (1.0, 0.5, 1, 1, 2, 1 / 3),
        (0.0, 0.5, 1, 2, 1, 1.0),  # the next call overlaps the tail on the second seat
        (0.0, 0.5, 2, 2, 1, 1 / 1.5),  # ... unless the tail holds both seats
        (1.0, 1.0, 2, 2, 2, 0.25),
        (0.5, 0.5, 1, 2, 2, 1 / 1.5),
    ],
)
def test_separations(
    think: float, pad: float, final: int, cl: int, clients: int, expected: float
) -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 9, 8, 3, cl)
    cs = [
        Client(1001001001 * (i + 1), 1, 25, 1.0, think, final_seats=final, pad=pad)
        for i in range(clients)
    ]
    scenario = Scenario(qs, clock, cs)
    scenario.run(24.0)
    for avg in scenario.averages():
        assert within(avg, expected, 1e-6), (scenario.averages(), expected)
    scenario.finish_all()
    assert all(c.executed == 25 for c in cs)
    assert qs.is_idle and qs.tot_seats_in_use == 0 and qs.tot_seats_waiting == 0


# ---------------------------------------------------------------- queue-count changes
def test_queue_count_reduction_by_attrition() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    running = start(qs, 3)
    waiting = start(qs, 2)
    qs.configure(desired_num_queues=2, queue_length_limit=10, hand_size=1, concurrency_limit=1)
    assert len(qs.queues) == 4  # busy queues stay until they empty
    assert qs.dealer is not None and qs.dealer.deck_size == 2
    late = start(qs, 5)  # dealt from the new deck: 5 % 2 = queue 1
    assert late.queue is qs.queues[1]
    clock.advance(0.1)
    qs.finish(running)
    # queue 3 emptied at its seat release and went away; queue 2 is now serving
    assert len(qs.queues) == 3
    assert [q.index for q in qs.queues] == [0, 1, 2]
    running2 = next(r for r in (waiting, late) if r.state == EXECUTING)
    qs.finish(running2)
    last = next(r for r in (waiting, late) if r.state == EXECUTING)
    qs.finish(last)
    assert len(qs.queues) == 2 and qs.is_idle
    assert qs.tot_seats_in_use == 0 and qs.active_queues == 0
    assert qs.dispatched == 3


def test_queue_count_increase_appends_queues() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 2, 10, 1, 1)
    first = qs.queues[0]
    qs.configure(desired_num_queues=8, queue_length_limit=10, hand_size=2, concurrency_limit=1)
    assert len(qs.queues) == 8 and qs.queues[0] is first
    assert start(qs, 7).state == EXECUTING


def test_reject_mode_keeps_old_queues_draining() -> None:
    clock = FakeEventClock()
    qs = make_qs(clock, 4, 10, 1, 1)
    running = start(qs, 0)
    waiting = start(qs, 1)
    qs.configure(desired_num_queues=0, concurrency_limit=1)
    assert qs.queue_length_limit == 10 and qs.hand_size == 1
    assert start(qs).reason == "concurrency-limit"
    qs.finish(running)
    assert waiting.state == EXECUTING  # the old queue still drains
    qs.finish(waiting)
    # The two used queues went away at their seat release; never-used ones stay, as in
    # Kubernetes (only a release removes a surplus queue).
    assert len(qs.queues) == 2 and all(q.is_empty() for q in qs.queues)
    assert qs.is_idle and qs.tot_seats_in_use == 0
