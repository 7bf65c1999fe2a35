"""Dynamic Retry-After (Kubernetes' TestDroppedRequestsTracker and ...PLIndependent)."""

from __future__ import annotations

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.controller import FlowController, SimpleObjectSet
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import REJECTED
from gateway.flowcontrol.retry_after import DroppedRequests
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import flow_schema, reject_level, resource_request, rule, user

# (second, drops recorded in that second, Retry-After afterwards)
SEQUENCE = [
    (0, 5, 1),
    (1, 11, 2),
    (2, 1, 2),
    (3, 11, 4),
    (4, 1, 4),
    (7, 1, 8),
    (11, 1, 8),
    (15, 1, 7),
    (17, 1, 6),
    (21, 14, 5),
    (22, 1, 10),
]


def test_sequence() -> None:
    tracker = DroppedRequests()
    assert tracker.retry_after == 1
    got = []
    for second, drops, _ in SEQUENCE:
        for _ in range(drops):
            tracker.record(second + 0.25)
        got.append(tracker.retry_after)
    assert got == [expected for _, _, expected in SEQUENCE]


def test_never_above_32() -> None:
    tracker = DroppedRequests()
    for second in range(0, 400):
        for _ in range(200):
            tracker.record(float(second))
    assert tracker.retry_after == 32


def test_levels_are_independent() -> None:
    clock = FakeEventClock(1000.0)
    config = SimpleObjectSet(
        (
            flow_schema("fa", "a", rule(user("alice")), precedence=10),
            flow_schema("fb", "b", rule(user("bob")), precedence=10),
        ),
        (reject_level("a"), reject_level("b")),
    )
    c = FlowController(
        clock=clock, server_concurrency_limit=10, config=config, mandatory=bootstrap.mandatory()
    )
    alice = c.classify(resource_request("alice"))
    bob = c.classify(resource_request("bob"))
    assert alice.level.qs.concurrency_limit > 0
    # Fill level a, then keep rejecting there only.
    wide = WorkEstimate(alice.level.qs.concurrency_limit)
    holder = c.start(alice, wide)
    values = []
    for second, drops, _ in SEQUENCE:
        clock.run_until(1000.0 + second + 0.5)
        for _ in range(drops):
            assert c.start(alice, WorkEstimate()).state == REJECTED
        values.append(c.retry_after("a"))
        assert c.retry_after("b") == 1  # b never dropped anything
    assert values == [expected for _, _, expected in SEQUENCE]
    c.finish(alice, holder)
    assert c.start(bob, WorkEstimate()).state != REJECTED
    assert c.retry_after("no-such-level") == 1
