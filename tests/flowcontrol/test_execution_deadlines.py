"""Executing requests' deadlines (``requestTimeout``) in the queue set: one clock timer per
queue set, armed at the earliest deadline; a request that finishes first costs the timer
nothing; each late request is expired once, at its own deadline (decision 0032)."""

from __future__ import annotations

import random

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, NO_DEADLINE, WAITING, QueueSet, Request
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock


def queue_set(clock: FakeEventClock, *, queues: int = 4, limit: int = 10) -> QueueSet:
    return QueueSet("pl", clock, desired_num_queues=queues, queue_length_limit=50, hand_size=1,
                    concurrency_limit=limit)  # fmt: skip


class Expiries:
    """Records (time, owner) of each expiry; the caller ends the request, as admission does."""

    def __init__(self, clock: FakeEventClock, qs: QueueSet) -> None:
        self.clock, self.qs = clock, qs
        self.seen: list[tuple[float, object]] = []

    def __call__(self, req: Request) -> None:
        self.seen.append((self.clock.now(), req.owner))
        self.qs.finish(req)


def start(qs: QueueSet, expiries: Expiries, name: str, timeout: float, flow: int = 0) -> Request:
    return qs.start_request(WorkEstimate(), flow, FlowStats(), "fs", execution_timeout=timeout,
                            on_expire=expiries, owner=name)  # fmt: skip


def test_the_timer_is_rearmed_at_an_earlier_deadline_and_each_request_expires_once() -> None:
    clock = FakeEventClock()
    qs = queue_set(clock)
    expiries = Expiries(clock, qs)
    start(qs, expiries, "a", 10.0)
    assert (clock.pending, clock.next_due()) == (1, 10.0)
    clock.run_until(1.0)
    start(qs, expiries, "b", 5.0)  # due at 6: earlier, the one timer moves
    assert (clock.pending, clock.next_due()) == (1, 6.0)
    clock.run_until(2.0)
    start(qs, expiries, "c", 20.0)  # due at 22: later, the timer stays
    assert (clock.pending, clock.next_due()) == (1, 6.0)
    clock.run_until(6.5)
    assert expiries.seen == [(6.0, "b")]
    assert clock.next_due() == 10.0  # re-armed at the earliest left
    clock.run_all()
    assert expiries.seen == [(6.0, "b"), (10.0, "a"), (22.0, "c")]
    assert clock.pending == 0 and qs.tot_requests_executing == 0


def test_a_request_that_finishes_in_time_cancels_nothing_and_is_never_expired() -> None:
    clock = FakeEventClock()
    qs = queue_set(clock)
    expiries = Expiries(clock, qs)
    done = start(qs, expiries, "done", 10.0)
    clock.run_until(3.0)
    qs.finish(done)  # before its deadline: the timer is left alone
    assert (clock.pending, clock.next_due()) == (1, 10.0)
    clock.run_all()
    assert expiries.seen == []
    assert clock.pending == 0  # nothing executing: not re-armed


def test_many_requests_share_one_timer() -> None:
    clock = FakeEventClock()
    qs = queue_set(clock, queues=16, limit=1000)
    expiries = Expiries(clock, qs)
    timeouts = [float(t) for t in range(1, 501)]
    random.Random(24).shuffle(timeouts)
    reqs = [start(qs, expiries, t, t, flow=i) for i, t in enumerate(timeouts)]
    assert all(r.state == EXECUTING for r in reqs)
    assert (clock.pending, clock.next_due()) == (1, 1.0)
    for req in reqs:
        if req.owner % 2 == 0:  # the even ones finish in time
            qs.finish(req)
    clock.run_all()
    odd = [float(t) for t in range(1, 501, 2)]
    assert expiries.seen == [(t, t) for t in odd]  # each at its own deadline, once
    assert clock.pending == 0


def test_queue_wait_counts_and_the_deadline_is_armed_at_dispatch() -> None:
    """kube's deadline runs from arrival; a queued request's starts counting while it waits."""
    clock = FakeEventClock()
    qs = queue_set(clock, limit=1)
    expiries = Expiries(clock, qs)
    running = qs.start_request(WorkEstimate(), 0, FlowStats(), "fs")  # no deadline
    assert running.state == EXECUTING and clock.pending == 0
    queued = start(qs, expiries, "queued", 10.0)
    assert queued.state == WAITING and clock.pending == 0  # no execution timer while waiting
    clock.run_until(4.0)
    qs.finish(running)
    assert queued.state == EXECUTING
    assert clock.next_due() == 10.0  # arrival (0) + 10, not dispatch (4) + 10
    clock.run_all()
    assert expiries.seen == [(10.0, "queued")]


def test_exempt_and_queueless_requests_are_bounded_too() -> None:
    """kube applies the timeout to every non-long-running request, whatever its level."""
    clock = FakeEventClock()
    for queues in (-1, 0):  # exempt; reject-when-full
        qs = queue_set(clock, queues=queues)
        expiries = Expiries(clock, qs)
        start(qs, expiries, "r", 5.0)
        clock.advance(6.0)
        assert [owner for _, owner in expiries.seen] == ["r"]
        assert qs.tot_requests_executing == 0


def test_no_timeout_arms_no_timer() -> None:
    clock = FakeEventClock()
    qs = queue_set(clock)
    req = qs.start_request(WorkEstimate(), 0, FlowStats(), "fs")
    assert req.deadline == NO_DEADLINE and clock.pending == 0
