"""The asyncio admission shell: release cannot be skipped (normal exit, exception, cancellation),
a caller that leaves while queued leaves its queue, and wait deadlines run on the fake clock."""

from __future__ import annotations

import asyncio

import pytest

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.admission import Admission, Rejected, admit
from gateway.flowcontrol.controller import Classification, FlowController, SimpleObjectSet
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, FINISHED, WAITING
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import (
    flow_schema,
    queuing_level,
    reject_level,
    resource_request,
    rule,
    user,
)

W1 = WorkEstimate()


def make() -> tuple[FlowController, FakeEventClock, Classification, Classification]:
    clock = FakeEventClock(100.0)
    config = SimpleObjectSet(
        (
            flow_schema("fq", "q", rule(user("alice")), precedence=10),
            flow_schema("fr", "r", rule(user("bob")), precedence=10),
        ),
        (queuing_level("q", 5, queues=4, hand_size=1, queue_length_limit=1), reject_level("r", 5)),
    )
    # 15 shares with catch-all: each level gets ceil(3 * 5 / 15) = 1 seat.
    c = FlowController(
        clock=clock, server_concurrency_limit=3, config=config, mandatory=bootstrap.mandatory()
    )
    q, r = c.classify(resource_request("alice")), c.classify(resource_request("bob"))
    assert q.level.qs.concurrency_limit == 1 and r.level.qs.concurrency_limit == 1
    return c, clock, q, r


def kinds_total(c: FlowController) -> int:
    return sum(abs(mark.current) for mark in c.kinds.marks.values())


def assert_quiet(c: FlowController, cls: Classification) -> None:
    qs = cls.level.qs
    assert (qs.tot_requests_executing, qs.tot_seats_in_use) == (0, 0)
    assert (qs.tot_requests_waiting, qs.tot_seats_waiting) == (0, 0)
    assert (cls.flow_stats.executing_requests, cls.flow_stats.inqueue_requests) == (0, 0)
    assert kinds_total(c) == 0


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_release_on_normal_exit() -> None:
    c, _, q, _ = make()
    async with admit(c, q, W1, read_only=False) as admission:
        assert admission.request.state == EXECUTING
        assert q.level.qs.tot_seats_in_use == 1
        assert c.kinds.marks["executing", "mutating"].current == 1
    assert admission.released and admission.request.state == FINISHED
    assert_quiet(c, q)
    assert q.flow_stats.execution_seconds["regular"].count == 1


async def test_release_on_exception() -> None:
    c, _, q, _ = make()
    with pytest.raises(ValueError, match="boom"):
        async with admit(c, q, W1):
            raise ValueError("boom")
    assert_quiet(c, q)
    assert q.flow_stats.dispatched == 1


async def test_early_release_is_idempotent() -> None:
    c, _, q, _ = make()
    async with admit(c, q, W1, watch=True) as admission:
        admission.release()  # a watch gives its seats back after the initial events
        assert q.level.qs.tot_seats_in_use == 0
        admission.release()
    assert_quiet(c, q)
    assert q.flow_stats.execution_seconds["watch"].count == 1


async def test_release_on_cancellation_while_executing() -> None:
    c, _, q, _ = make()
    entered = asyncio.Event()

    async def work() -> None:
        async with admit(c, q, W1):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(work())
    await entered.wait()
    assert q.level.qs.tot_seats_in_use == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_quiet(c, q)


async def test_waiter_runs_when_seat_frees() -> None:
    c, _, q, _ = make()
    order: list[str] = []

    async def second() -> None:
        async with admit(c, q, W1):
            order.append("second")

    async with admit(c, q, W1):
        task = asyncio.create_task(second())
        await settle()
        assert q.level.qs.tot_requests_waiting == 1
        assert c.kinds.marks["waiting", "readOnly"].current == 1
        order.append("first")
    await task
    assert order == ["first", "second"]
    assert_quiet(c, q)


async def test_cancellation_while_queued() -> None:
    c, _, q, _ = make()

    async def waiter() -> None:
        async with admit(c, q, W1, descr="waiter"):
            pytest.fail("a cancelled waiter must not run")

    async with admit(c, q, W1):
        task = asyncio.create_task(waiter())
        await settle()
        waiting = [r for queue in q.level.qs.queues for r in queue.waiting if r.state == WAITING]
        assert len(waiting) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert q.level.qs.tot_requests_waiting == 0
        assert q.flow_stats.rejected["cancelled"] == 1
        assert kinds_total(c) == 1  # only the holder, executing
    assert_quiet(c, q)
    assert q.flow_stats.dispatched == 1  # the waiter never got a seat


async def test_cancelled_after_dispatch_before_resuming() -> None:
    """The core hands the seat over, but the task is cancelled before it runs: give it back."""
    c, _, q, _ = make()

    async def waiter() -> None:
        async with admit(c, q, W1):
            pytest.fail("must not run")

    holder = c.start(q, W1)
    task = asyncio.create_task(waiter())
    await settle()
    assert q.level.qs.tot_requests_waiting == 1
    c.finish(q, holder)  # dispatches the waiter and resolves its future ...
    assert q.level.qs.tot_requests_executing == 1
    task.cancel()  # ... but it is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_quiet(c, q)


async def test_wait_deadline_times_out_on_fake_clock() -> None:
    c, clock, q, _ = make()
    outcome: list[BaseException] = []

    async def waiter() -> None:
        try:
            async with admit(c, q, W1, wait_deadline=clock.now() + 15.0):
                pytest.fail("must time out")
        except Rejected as exc:
            outcome.append(exc)

    async with admit(c, q, W1):
        task = asyncio.create_task(waiter())
        await settle()
        clock.advance(14.999)
        await settle()
        assert not outcome
        clock.advance(0.001)
        await task
    (exc,) = outcome
    assert isinstance(exc, Rejected)
    assert exc.reason == "time-out" and exc.retry_after == 1
    assert exc.classification is q
    assert "'q'" in str(exc) and "time-out" in str(exc)
    assert q.flow_stats.rejected["time-out"] == 1
    assert_quiet(c, q)


async def test_rejected_carries_reason_and_retry_after() -> None:
    c, clock, _, r = make()
    async with admit(c, r, W1):
        reasons = []
        for _ in range(6):
            with pytest.raises(Rejected) as info:
                async with admit(c, r, W1):
                    pytest.fail("must be rejected")
            reasons.append(info.value.reason)
        assert reasons == ["concurrency-limit"] * 6
        assert info.value.retry_after == c.retry_after("r") == 1
        clock.advance(1.0)
        for _ in range(3):
            with pytest.raises(Rejected) as info:
                async with admit(c, r, W1):
                    pass
        # 6 drops in the previous second >= 3 x 1: the advice doubles.
        assert info.value.retry_after == 2
    assert_quiet(c, r)


async def test_queue_full() -> None:
    c, _, q, _ = make()
    async with admit(c, q, W1):
        holder = asyncio.create_task(_hold(c, q))
        await settle()  # fills the queue (length limit 1)
        with pytest.raises(Rejected) as info:
            async with admit(c, q, W1):
                pass
        assert info.value.reason == "queue-full"
    await holder
    assert_quiet(c, q)


async def _hold(c: FlowController, cls: Classification) -> Admission:
    async with admit(c, cls, W1) as admission:
        return admission
