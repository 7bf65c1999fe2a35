"""The one admission decision, ``try_start``: its three outcomes, the wait limit read only for
requests that queue, and a waiter that is abandoned before its waiting task ever ran."""

from __future__ import annotations

import asyncio

from gateway.flowcontrol.admission import admit
from gateway.flowcontrol.controller import Classification, FlowController, SimpleObjectSet
from gateway.flowcontrol.hold import Admission, Rejected, Waiter, try_start
from gateway.flowcontrol.queueset import EXECUTING, WAITING
from tests.flowcontrol.builders import flow_schema, reject_level, resource_request, rule, user
from tests.flowcontrol.test_admission import W1, assert_quiet, kinds_total, make, settle


def holder_and_waiter(c: FlowController, q: Classification) -> tuple[Admission, Waiter]:
    """The level's one seat held, and a request queued behind it."""
    held = try_start(c, q, W1)
    assert isinstance(held, Admission)
    waiter = try_start(c, q, W1)
    assert isinstance(waiter, Waiter)
    return held, waiter


async def test_runs_now_queues_or_is_refused() -> None:
    c, _, q, r = make()
    asked: list[object] = []

    def limit(descr: object) -> float:
        asked.append(descr)
        return 5.0

    first = try_start(c, q, W1, descr="first", wait_limit=limit)
    assert isinstance(first, Admission) and first.request.state == EXECUTING
    assert asked == []  # ran at once: no wait limit worked out
    second = try_start(c, q, W1, descr="second", wait_limit=limit, read_only=False)
    assert isinstance(second, Waiter) and second.request.state == WAITING
    assert asked == ["second"]
    assert c.kinds.marks["waiting", "mutating"].current == 1
    third = try_start(c, q, W1, descr="third")
    assert isinstance(third, Rejected) and third.reason == "queue-full"
    held = try_start(c, r, W1)  # a level that never queues
    assert isinstance(held, Admission)
    async with held:
        refused = try_start(c, r, W1)
        assert isinstance(refused, Rejected) and refused.reason == "concurrency-limit"
    async with first:
        pass
    assert first.released
    admission = await second.wait()  # dispatched when the first released its seat
    assert c.kinds.marks["waiting", "mutating"].current == 0
    admission.release()
    assert_quiet(c, q)
    assert_quiet(c, r)


async def test_wait_limit_becomes_the_deadline() -> None:
    c, clock, q, _ = make()
    held = try_start(c, q, W1)
    assert isinstance(held, Admission)
    waiter = try_start(c, q, W1, wait_limit=lambda _: 2.0)
    assert isinstance(waiter, Waiter)
    task = asyncio.ensure_future(waiter.wait())
    await settle()
    clock.advance(2.0)
    await settle()
    rejected = task.exception()
    assert isinstance(rejected, Rejected) and rejected.reason == "time-out"
    held.release()
    assert_quiet(c, q)


async def test_waiter_abandoned_before_its_task_ran_leaves_the_queue() -> None:
    c, _, q, _ = make()
    held, waiter = holder_and_waiter(c, q)
    task = asyncio.ensure_future(waiter.wait())
    task.cancel()  # before its first step: ``wait`` never runs
    await settle()
    assert task.cancelled()
    assert q.level.qs.tot_requests_waiting == 1 and kinds_total(c) == 2
    waiter.abandon()
    waiter.abandon()  # idempotent
    assert q.level.qs.tot_requests_waiting == 0
    held.release()
    assert_quiet(c, q)


async def test_seats_granted_to_an_abandoned_waiter_go_back() -> None:
    c, _, q, _ = make()
    held, waiter = holder_and_waiter(c, q)
    held.release()  # dispatches the waiter: it holds the seat now
    assert waiter.request.state == EXECUTING
    waiter.abandon()
    assert_quiet(c, q)


def without_level_q(c: FlowController) -> None:
    """A reload that deletes level ``q`` and sends alice's schema to ``r``."""
    c.apply(
        SimpleObjectSet(
            (
                flow_schema("fq", "r", rule(user("alice")), precedence=10),
                flow_schema("fr", "r", rule(user("bob")), precedence=10),
            ),
            (reject_level("r", 5),),
        )
    )


async def test_classified_before_a_reload_that_removed_its_level_runs_in_the_new_one() -> None:
    c, _, _, _ = make()
    alice = resource_request("alice")
    stale = c.classify(alice)  # the caller awaits here; a reload removes its level
    without_level_q(c)
    assert "q" not in c.levels
    started = try_start(c, stale, W1, descr=alice)
    assert isinstance(started, Admission)
    assert started.classification.priority_level == "r"
    r = started.classification
    assert r.level.qs.tot_seats_in_use == 1 and r.flow_stats.executing_requests == 1
    started.release()  # gives the seat back to the level it started in
    assert_quiet(c, r)
    again = try_start(c, r, W1)  # r's one seat is free again
    assert isinstance(again, Admission)
    again.release()


async def test_classified_before_a_reload_that_retired_its_busy_level_runs_in_the_new_one() -> None:
    c, _, q, _ = make()
    alice = resource_request("alice")
    busy = try_start(c, q, W1)  # keeps the old level alive, quiescing
    assert isinstance(busy, Admission)
    without_level_q(c)
    assert c.levels["q"].quiescing
    started = try_start(c, q, W1, descr=alice)  # the old level would have queued it
    assert isinstance(started, Admission)
    assert started.classification.level is c.levels["r"]
    full = try_start(c, q, W1, descr=alice)  # refused by r (no queues), not queued in q
    assert isinstance(full, Rejected) and full.reason == "concurrency-limit"
    assert full.classification.priority_level == "r"
    assert q.level.qs.tot_requests_waiting == 0
    started.release()
    busy.release()
    assert "q" not in c.levels  # reaped once idle
    assert_quiet(c, started.classification)


async def test_admit_across_a_reload_releases_in_the_level_it_ran_in() -> None:
    c, _, _, _ = make()
    alice = resource_request("alice")
    stale = c.classify(alice)
    await settle()  # the caller awaits between classification and admission ...
    without_level_q(c)  # ... and a reload lands meanwhile
    async with admit(c, stale, W1, descr=alice) as admission:
        assert admission.classification.priority_level == "r"
    assert_quiet(c, admission.classification)
