"""Reconfiguration (``FlowController.apply``/``reconfigure``, the borrowing adjuster's period):
queued and executing requests are neither dropped nor counted twice; a removed level quiesces
while busy and disappears once idle (Kubernetes); a reload computes the limits once."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.borrowing import BorrowingAdjuster
from gateway.flowcontrol.controller import Classification, FlowController, SimpleObjectSet
from gateway.flowcontrol.debug import dump_priority_levels
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.objects import FlowSchema, PriorityLevelConfiguration
from gateway.flowcontrol.queueset import EXECUTING, FINISHED, REJECTED, WAITING, Request
from gateway.metrics.apf import APFMetrics
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import (
    flow_schema,
    queuing_level,
    resource_request,
    rule,
    user,
)

W1 = WorkEstimate()
ALICE = resource_request("alice")
FQ = flow_schema("fq", "q", rule(user("alice")), precedence=10)
FO = flow_schema("fo", "other", rule(user("olga")), precedence=10)


def config(
    *levels: PriorityLevelConfiguration, schemas: tuple[FlowSchema, ...] = (FQ, FO)
) -> SimpleObjectSet:
    return SimpleObjectSet(schemas, levels)


def controller() -> tuple[FlowController, FakeEventClock]:
    clock = FakeEventClock()
    c = FlowController(
        clock=clock,
        server_concurrency_limit=15,
        config=config(
            queuing_level("q", 10, queues=4, hand_size=1, queue_length_limit=10),
            queuing_level("other", 10),
        ),
        mandatory=bootstrap.mandatory(),
    )
    return c, clock


def load(c: FlowController, n_running: int, n_waiting: int) -> tuple[Classification, list[Request]]:
    cls = c.classify(ALICE)
    assert cls.level.qs.concurrency_limit == n_running
    reqs = [c.start(cls, W1, descr=ALICE) for _ in range(n_running + n_waiting)]
    assert [r.state for r in reqs] == [EXECUTING] * n_running + [WAITING] * n_waiting
    return cls, reqs


def drain(c: FlowController, cls: Classification, reqs: list[Request]) -> None:
    for _ in range(len(reqs)):
        running = [r for r in reqs if r.state == EXECUTING]
        if not running:
            break
        c.finish(cls, running[0])


def test_spec_change_keeps_requests() -> None:
    c, _ = controller()
    # 15 seats, shares 10 + 10 + catch-all 5: q gets ceil(15 * 10 / 25) = 6.
    cls, reqs = load(c, 6, 4)
    level, qs = cls.level, cls.level.qs
    before = (qs.tot_requests_executing, qs.tot_seats_in_use, qs.tot_requests_waiting)
    c.apply(
        config(
            queuing_level("q", 20, queues=8, hand_size=2, queue_length_limit=5),
            queuing_level("other", 10),
        )
    )
    assert c.levels["q"] is level and level.qs is qs and not level.quiescing
    assert len(qs.queues) == 8 and qs.hand_size == 2
    # More shares: q now gets ceil(15 * 20 / 35) = 9 seats, so 3 waiting requests start.
    assert qs.concurrency_limit == 9
    assert (qs.tot_requests_executing, qs.tot_requests_waiting) == (9, 1)
    assert before[0] + before[2] == qs.tot_requests_executing + qs.tot_requests_waiting
    drain(c, cls, reqs)
    assert all(r.state == FINISHED for r in reqs)
    assert qs.dispatched == 10 and qs.rejected == 0
    assert cls.flow_stats.dispatched == 10
    assert qs.is_idle and qs.tot_seats_in_use == 0


def test_reapplying_the_same_config_changes_nothing() -> None:
    c, _ = controller()
    cls, reqs = load(c, 6, 2)
    same = config(
        queuing_level("q", 10, queues=4, hand_size=1, queue_length_limit=10),
        queuing_level("other", 10),
    )
    c.apply(same)
    c.apply(same)
    qs = cls.level.qs
    assert (qs.tot_requests_executing, qs.tot_requests_waiting, qs.dispatched) == (6, 2, 6)
    drain(c, cls, reqs)
    assert qs.dispatched == 8 and qs.is_idle


def test_removed_level_quiesces_then_disappears() -> None:
    c, _ = controller()
    cls, reqs = load(c, 6, 3)
    level = cls.level
    nominal_other = c.levels["other"].nominal_cl
    c.apply(config(queuing_level("other", 10), schemas=(FO,)))
    assert c.levels["q"] is level and level.quiescing
    assert "q,      " in dump_priority_levels(c).replace("true", "T")  # still listed
    # A quiescing level still counts in the shares: others' nominal limits are unchanged.
    assert c.levels["other"].nominal_cl == nominal_other
    # New requests no longer classify into it.
    assert c.classify(ALICE).flow_schema == "catch-all"
    # Its requests carry on: the waiting ones are dispatched as seats free up.
    finished = 0
    while any(r.state == EXECUTING for r in reqs):
        assert "q" in c.levels
        c.finish(cls, next(r for r in reqs if r.state == EXECUTING))
        finished += 1
    assert finished == 9 and all(r.state == FINISHED for r in reqs)
    assert "q" not in c.levels  # reaped when idle
    # ... and the shares are recomputed without it: ceil(15 * 10 / 15).
    assert c.levels["other"].nominal_cl == 10


def test_removed_idle_level_goes_at_once() -> None:
    c, _ = controller()
    c.apply(config(queuing_level("other", 10), schemas=(FO,)))
    assert "q" not in c.levels
    assert c.levels["other"].nominal_cl == 10


def test_re_added_level_stops_quiescing() -> None:
    c, _ = controller()
    cls, reqs = load(c, 6, 1)
    c.apply(config(queuing_level("other", 10), schemas=(FO,)))
    assert cls.level.quiescing
    c.apply(
        config(
            queuing_level("q", 10, queues=4, hand_size=1, queue_length_limit=10),
            queuing_level("other", 10),
        )
    )
    assert c.levels["q"] is cls.level and not cls.level.quiescing
    assert c.classify(ALICE).priority_level == "q"
    drain(c, cls, reqs)
    assert "q" in c.levels and cls.level.qs.dispatched == 7


def test_quiescing_level_reaped_when_idle_by_cancellation_and_time_out() -> None:
    """Kubernetes reaps a quiescing level after any request leaves it, not only on finish."""
    c, clock = controller()
    cls = c.classify(ALICE)
    # A finished request whose final seats (all 6) are held for 100 s keeps the others waiting.
    holder = c.start(cls, WorkEstimate(1, 6, 100.0))
    timed = c.start(cls, W1, wait_deadline=clock.now() + 5.0)
    cancelled = c.start(cls, W1)
    c.finish(cls, holder)
    assert timed.state == cancelled.state == WAITING
    c.apply(config(queuing_level("other", 10), schemas=(FO,)))
    assert cls.level.quiescing
    assert c.cancel(cls, cancelled)
    assert "q" in c.levels  # the timed request still waits
    clock.advance(5.0)
    assert timed.state == REJECTED and timed.reason == "time-out"
    assert cls.level.qs.is_idle
    assert "q" not in c.levels


def test_classification_caches_follow_a_reconfiguration() -> None:
    c, _ = controller()
    first = c.classify(ALICE)
    assert c.classify(ALICE) is first
    twin = resource_request("alice")
    assert twin is not ALICE and c.classify(twin) is first  # an equal digest: the same entry
    moved = flow_schema("fq", "other", rule(user("alice")), precedence=10)
    c.apply(config(queuing_level("q", 10), queuing_level("other", 10), schemas=(moved, FO)))
    again = c.classify(ALICE)
    assert again is not first and again.priority_level == "other"
    assert c.classify(twin).priority_level == "other"


def test_reconfigure_computes_the_limits_once_for_config_and_concurrency_limit() -> None:
    c, _ = controller()
    computed: list[int] = []
    c.on_digest.append(lambda: computed.append(c.server_cl))
    bigger = config(queuing_level("q", 20, queues=4, hand_size=1), queuing_level("other", 10))
    c.reconfigure(bigger, 35)
    assert computed == [35]
    assert c.config is bigger
    # 35 seats, shares 20 + 10 + catch-all 5: q gets 20, as apply + set_server_concurrency_limit.
    assert c.levels["q"].nominal_cl == 20
    twice, _ = controller()
    twice.apply(bigger)
    twice.set_server_concurrency_limit(35)
    assert {n: lv.nominal_cl for n, lv in twice.levels.items()} == {
        n: lv.nominal_cl for n, lv in c.levels.items()
    }


def test_reconfigure_with_a_bad_limit_changes_nothing() -> None:
    c, _ = controller()
    running = c.config
    limits = {name: level.nominal_cl for name, level in c.levels.items()}
    with pytest.raises(ValueError, match="concurrency limit must be positive"):
        c.reconfigure(config(queuing_level("q", 1)), 0)
    assert c.config is running and c.server_cl == 15
    assert {name: level.nominal_cl for name, level in c.levels.items()} == limits


def test_the_borrowing_adjuster_restarts_itself_on_a_new_period() -> None:
    c, clock = controller()
    adjuster = BorrowingAdjuster(c, clock, period=10.0, keep_history=True)

    def ticks() -> list[float]:
        return [snapshot.time for snapshot in adjuster.history.get("q", [])]

    adjuster.start()
    clock.advance(4.0)
    adjuster.reconfigure(3.0)  # the old timer (due at 10) is gone; the next tick is at 7
    clock.advance(6.5)
    assert ticks() == [7.0, 10.0]
    with pytest.raises(ValueError, match="period must be positive"):
        adjuster.reconfigure(float("nan"))
    assert adjuster.period == 3.0 and adjuster.running
    adjuster.stop()
    adjuster.reconfigure(5.0)  # a stopped adjuster stays stopped
    clock.advance(20.0)
    assert ticks() == [7.0, 10.0] and not adjuster.running


def exported(c: FlowController) -> str:
    registry = CollectorRegistry()
    registry.register(APFMetrics(c))
    return generate_latest(registry).decode()


def dispatched_series(c: FlowController) -> dict[tuple[str, str], float]:
    text = exported(c)
    return {
        (s.labels["priority_level"], s.labels["flow_schema"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "apiserver_flowcontrol_dispatched_requests_total"
    }


def test_every_flow_schema_has_its_series_at_zero_before_its_first_request() -> None:
    """``rate()`` sees a flow's first dispatch only if its series existed before (at 0)."""
    c, _ = controller()
    assert dispatched_series(c) == {
        ("q", "fq"): 0,
        ("other", "fo"): 0,
        ("exempt", "exempt"): 0,
        ("catch-all", "catch-all"): 0,
    }
    # counters and gauges, not seven empty histograms per unused FlowSchema (scrape size)
    c.start(c.classify(ALICE), W1, descr=ALICE)  # fq's first request: its histograms appear
    waits = {
        s.labels["flow_schema"]
        for family in text_string_to_metric_families(exported(c))
        for s in family.samples
        if s.name == "apiserver_flowcontrol_request_wait_duration_seconds_bucket"
    }
    assert waits == {"fq"}
    added = flow_schema("new", "other", rule(user("nina")), precedence=20)
    c.apply(config(queuing_level("q", 10), queuing_level("other", 10), schemas=(FQ, FO, added)))
    assert dispatched_series(c)[("other", "new")] == 0


def test_seat_seconds_are_exported_per_level() -> None:
    c, clock = controller()
    cls, reqs = load(c, 6, 0)  # 6 seats for 1.5 s
    clock.advance(1.5)
    text = exported(c)
    assert 'gateway_flowcontrol_priority_level_seat_seconds_total{priority_level="q"} 9.0' in text
    assert (
        'gateway_flowcontrol_priority_level_seat_seconds_total{priority_level="other"} 0.0' in text
    )
    drain(c, cls, reqs)
