"""Property: under random arrivals, widths, finishes, cancellations and time-outs, a queue set
never runs more seats than its limit (except one too-wide request running alone), its gauges
always equal a recount, and everything returns to zero when the traffic ends."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import (
    EXECUTING,
    FINISHED,
    REJECTED,
    WAITING,
    QueueSet,
    Request,
)
from gateway.flowcontrol.shufflesharding import required_entropy_bits
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock
from tests.support.examples import examples


@dataclass
class Tracked:
    req: Request
    stats: FlowStats
    finished_at: float | None = None
    width: int = 0  # max seats at arrival (dispatch may clip final seats to the limit)


@dataclass
class Model:
    qs: QueueSet
    clock: FakeEventClock
    stats: list[FlowStats] = field(default_factory=lambda: [FlowStats() for _ in range(3)])
    reqs: list[Tracked] = field(default_factory=list)

    def holds_seats(self, t: Tracked) -> bool:
        if t.req.state == EXECUTING:
            return True
        if t.req.state == FINISHED:
            assert t.finished_at is not None
            return self.clock.now() < t.finished_at + t.req.additional_latency
        return False

    def check(self) -> None:
        qs, limit = self.qs, self.qs.concurrency_limit
        holders = [t for t in self.reqs if self.holds_seats(t)]
        waiting = [t for t in self.reqs if t.req.state == WAITING]
        executing = [t for t in self.reqs if t.req.state == EXECUTING]
        in_use = sum(t.req.max_seats for t in holders)
        assert qs.tot_seats_in_use == in_use
        assert qs.tot_requests_executing == len(executing)
        assert qs.tot_requests_waiting == len(waiting)
        assert qs.tot_seats_waiting == sum(t.req.max_seats for t in waiting)
        # The seat limit, and its one documented exception: a request wider than the limit
        # starts only when no other request is executing, and then runs alone (seats still
        # held by earlier requests' additional latency do not count, as in Kubernetes).
        wide = [t for t in holders if t.width > limit]
        narrow = [t for t in holders if t.width <= limit]
        assert sum(t.req.max_seats for t in narrow) <= limit, "narrow requests over the limit"
        if not wide:
            assert in_use <= limit
        wide_running = [t for t in executing if t.width > limit]
        if wide_running:
            assert executing == wide_running[:1], "a too-wide request did not run alone"
        if qs.desired_num_queues > 0:
            # Queued levels dispatch only below the limit, so a wide tail blocks the next one.
            assert len(wide) <= 1
        # Per-queue sums.
        for queue in qs.queues:
            queued = [t.req for t in waiting if t.req.queue is queue]
            assert queue.n_waiting == len(queued)
            assert queue.max_seats_sum == sum(r.max_seats for r in queued)
            assert queue.initial_seats_sum == sum(r.initial_seats for r in queued)
            assert queue.total_work_sum == sum(r.total_work for r in queued)
            assert queue.seats_in_use == sum(
                t.req.max_seats for t in holders if t.req.queue is queue
            )
            assert queue.executing == {t.req for t in executing if t.req.queue is queue}
        assert qs.active_queues == sum(1 for q in qs.queues if not q.is_empty())
        # FlowStats gauges equal recounts.
        for stats in self.stats:
            mine = [t for t in self.reqs if t.stats is stats]
            assert stats.inqueue_requests == sum(1 for t in mine if t.req.state == WAITING)
            assert stats.inqueue_seats == sum(
                t.req.max_seats for t in mine if t.req.state == WAITING
            )
            assert stats.executing_requests == sum(1 for t in mine if t.req.state == EXECUTING)
            assert stats.executing_seats == sum(
                t.req.max_seats for t in mine if self.holds_seats(t)
            )
            assert stats.dispatched == sum(1 for t in mine if t.req.state in (EXECUTING, FINISHED))
            assert sum(stats.rejected.values()) == sum(1 for t in mine if t.req.state == REJECTED)


@st.composite
def queue_configs(draw: st.DrawFn) -> tuple[int, int, int, int]:
    queues = draw(st.sampled_from([0, 1, 1, 2, 3, 5, 8, 16]))
    hand = 0
    if queues:
        hand = draw(st.integers(1, min(queues, 6)))
        while required_entropy_bits(queues, hand) > 60:
            hand -= 1
    qll = draw(st.integers(0, 5))
    limit = draw(st.integers(1, 6))
    return queues, hand, qll, limit


arrive = st.tuples(
    st.just("arrive"),
    st.integers(1, 5),  # initial seats
    st.integers(0, 5),  # final seats
    st.sampled_from([0.0, 0.0, 0.05, 0.3]),  # additional latency
    st.integers(0, 2**64 - 1),  # flow hash
    st.sampled_from([None, None, 0.1, 0.5, 2.0]),  # wait limit
)
finish = st.tuples(st.just("finish"), st.integers(0, 50))
cancel = st.tuples(st.just("cancel"), st.integers(0, 50))
advance = st.tuples(st.just("advance"), st.sampled_from([0.0, 0.01, 0.1, 0.5, 1.0]))
operations = st.lists(st.one_of(arrive, arrive, finish, finish, cancel, advance), max_size=60)


def _do(model: Model, op: tuple[Any, ...]) -> None:
    qs, clock = model.qs, model.clock
    kind = op[0]
    if kind == "arrive":
        _, initial, final, latency, hash_value, wait = op
        assert isinstance(hash_value, int)
        stats = model.stats[hash_value % 3]
        deadline = None if wait is None else clock.now() + float(wait)
        work = WorkEstimate(int(initial), int(final), float(latency))
        req = qs.start_request(work, hash_value, stats, f"fs{hash_value % 3}", "", None, deadline)
        model.reqs.append(Tracked(req, stats, width=work.max_seats))
    elif kind == "finish":
        running = [t for t in model.reqs if t.req.state == EXECUTING]
        if running:
            t = running[int(op[1]) % len(running)]
            t.finished_at = clock.now()
            qs.finish(t.req)
    elif kind == "cancel":
        waiting = [t for t in model.reqs if t.req.state == WAITING]
        if waiting:
            t = waiting[int(op[1]) % len(waiting)]
            assert qs.cancel(t.req, "cancelled")
    else:
        clock.advance(float(op[1]))


@settings(max_examples=examples(500), deadline=None)
@given(queue_configs(), operations)
def test_seat_limit_and_counters(
    config: tuple[int, int, int, int], ops: list[tuple[Any, ...]]
) -> None:
    queues, hand, qll, limit = config
    clock = FakeEventClock()
    qs = QueueSet(
        "pl",
        clock,
        desired_num_queues=queues,
        queue_length_limit=qll,
        hand_size=hand,
        concurrency_limit=limit,
    )
    model = Model(qs, clock)
    for op in ops:
        _do(model, op)
        model.check()
    # Everything ends: finish what runs, let waits time out or get dispatched, drain the clock.
    for _ in range(10 * len(model.reqs) + 10):
        running = [t for t in model.reqs if t.req.state == EXECUTING]
        waiting = [t for t in model.reqs if t.req.state == WAITING]
        if not running and not waiting:
            break
        if running:
            running[0].finished_at = clock.now()
            qs.finish(running[0].req)
        elif waiting:
            clock.advance(0.5)  # tails release; deadlines pass
            if not any(t.req.state == EXECUTING for t in model.reqs):
                qs.cancel(waiting[0].req, "cancelled")
        model.check()
    clock.run_all()
    model.check()
    assert qs.is_idle
    assert (qs.tot_seats_in_use, qs.tot_seats_waiting, qs.active_queues) == (0, 0, 0)
    for queue in qs.queues:
        assert (queue.n_waiting, queue.seats_in_use, queue.total_work_sum) == (0, 0, 0)
        assert (queue.max_seats_sum, queue.initial_seats_sum, len(queue.executing)) == (0, 0, 0)
    assert not qs.executing_sans_queue
    for stats in model.stats:
        assert (stats.inqueue_requests, stats.inqueue_seats) == (0, 0)
        assert (stats.executing_requests, stats.executing_seats) == (0, 0)
    assert qs.dispatched + qs.rejected == len(model.reqs)
    assert qs.dispatched == sum(s.dispatched for s in model.stats)
    assert qs.rejected == sum(sum(s.rejected.values()) for s in model.stats)
    assert not math.isnan(qs.current_r)
