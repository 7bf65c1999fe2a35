"""Debug dumps as kube-apiserver writes them: tabwriter layout, column sets, value formats."""

from __future__ import annotations

import pytest

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.controller import FlowController, SimpleObjectSet
from gateway.flowcontrol.debug import (
    dump_priority_levels,
    dump_queues,
    dump_requests,
    go_duration,
    tabwrite,
)
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, WAITING
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import (
    exempt_level,
    flow_schema,
    group,
    queuing_level,
    resource_request,
    rule,
    user,
)

ALICE = resource_request(
    "alice", verb="list", api_group="apps", resource="deployments", namespace="ns1"
)
ROOT = resource_request("root", ("system:masters",), resource="pods", subresource="log")
EPOCH = 1_000_000_000.0  # 2001-09-09T01:46:40Z


def test_tabwrite_alignment() -> None:
    # min width 8, padding 1; the last cell of a row is not padded
    assert tabwrite([["a", "b"], ["ccc", "d"]]) == "a,      b\nccc,    d\n"
    assert tabwrite([["abcdefgh", "x", "y"], ["i", "jj", "z"]]) == (
        "abcdefgh, x,      y\ni,        jj,     z\n"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (5e-9, "5ns"),
        (1.5e-6, "1.5µs"),
        (0.005, "5ms"),
        (0.0012345678, "1.234568ms"),
        (1.5, "1.5s"),
        (42.0, "42s"),
        (90.0, "1m30s"),
        (3600.0, "1h0m0s"),
        (3725.25, "1h2m5.25s"),
    ],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def make() -> tuple[FlowController, FakeEventClock]:
    clock = FakeEventClock(0.5)
    config = SimpleObjectSet(
        (
            flow_schema("exempt", "exempt", rule(group("system:masters")), precedence=1),
            flow_schema("fq", "q", rule(user("alice")), precedence=10),
        ),
        (exempt_level("exempt"), queuing_level("q", 5, queues=4, hand_size=1)),
    )
    # shares: q 5 + catch-all 5 -> q gets ceil(2 * 5 / 10) = 1 seat
    return FlowController(
        clock=clock, server_concurrency_limit=2, config=config, mandatory=bootstrap.mandatory()
    ), clock


def test_dump_priority_levels() -> None:
    c, _ = make()
    q = c.classify(ALICE)
    running = c.start(q, WorkEstimate())
    waiting = c.start(q, WorkEstimate())
    assert (running.state, waiting.state) == (EXECUTING, WAITING)
    c.start(c.classify(ROOT), WorkEstimate())
    lines = dump_priority_levels(c).splitlines()
    # Each column is as wide as its widest cell (with the comma) plus one, at least 8.
    widths = (19, 14, 8, 13, 17, 19, 20, 18, 18)

    def row(*cells: str) -> str:
        padded = (f"{cell},".ljust(width) for cell, width in zip(cells, widths, strict=False))
        return "".join(padded) + cells[-1]

    assert lines == [
        "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, "
        "ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, "
        "CancelledRequests",
        row("catch-all", "0", "true", "false", "0", "0", "0", "0", "0", "0"),
        row("exempt", "0", "false", "false", "0", "1", "1", "0", "0", "0"),
        row("q", "1", "false", "false", "1", "1", "1", "0", "0", "0"),
    ]
    assert lines[3].startswith("q,                 1,            false,  false,       1,  ")


def test_long_cells_widen_their_column() -> None:
    c, _ = make()
    name = "a-priority-level-with-a-long-name"
    c.apply(SimpleObjectSet((), (queuing_level(name, 5, queues=2, hand_size=1),)))
    lines = dump_priority_levels(c).splitlines()
    assert lines[0].startswith("PriorityLevelName,".ljust(len(name) + 2) + "ActiveQueues,")
    assert any(line.startswith(f"{name}, 0,") for line in lines)


def test_dump_queues() -> None:
    c, clock = make()
    q = c.classify(ALICE)
    c.start(q, WorkEstimate())
    clock.advance(0.25)
    c.start(q, WorkEstimate(1, 2, 0.5))
    index = q.hash_value % 4
    lines = dump_queues(c).splitlines()
    assert lines[0] == (
        "PriorityLevelName, Index,  PendingRequests, ExecutingRequests, SeatsInUse, "
        "NextDispatchR, InitialSeatsSum, MaxSeatsSum, TotalWorkSum"
    )
    rows = [line.split(",") for line in lines[1:]]
    assert [(r[0], r[1].strip()) for r in rows] == [("q", str(i)) for i in range(4)]
    busy = [cell.strip() for cell in rows[index]]
    # R ran 0.25 s at one seat per active queue, and the queue's next dispatch R is raised to
    # its head's arrival R (anti-windup); the head's work is 1 x 3 ms + 2 x 0.5 s.
    assert busy == ["q", str(index), "1", "1", "1", "0.25000000ss", "1", "2", "1.00300000ss"]
    idle = [cell.strip() for cell in rows[(index + 1) % 4]]
    assert idle[2:] == ["0", "0", "0", "0.00000000ss", "0", "0", "0.00000000ss"]


def test_dump_requests() -> None:
    c, clock = make()
    q = c.classify(ALICE)
    running = c.start(q, WorkEstimate(), descr=ALICE)
    clock.advance(0.25)
    first = c.start(q, WorkEstimate(1, 2, 0.005), descr=ALICE)
    clock.advance(0.125)
    second = c.start(q, WorkEstimate(), descr=ALICE)
    exempt = c.start(c.classify(ROOT), WorkEstimate(), descr=ROOT)
    assert exempt.state == EXECUTING
    assert running.queue is not None
    index = running.queue.index
    out = dump_requests(c, to_wall=lambda t: EPOCH + t)
    lines = out.splitlines()
    assert [cell.strip() for cell in lines[0].split(",")] == [
        "PriorityLevelName", "FlowSchemaName", "QueueIndex", "RequestIndexInQueue",
        "FlowDistingsher", "ArriveTime", "InitialSeats", "FinalSeats", "AdditionalLatency",
        "StartTime",
    ]  # fmt: skip
    rows = {tuple(cell.strip() for cell in line.split(",")) for line in lines[1:]}
    never = "0001-01-01T00:00:00Z"
    assert rows == {
        ("q", "fq", str(index), "-1", "alice", "2001-09-09T01:46:40.5Z", "1", "0", "0s",
         "2001-09-09T01:46:40.5Z"),
        ("q", "fq", str(index), "0", "alice", "2001-09-09T01:46:40.75Z", "1", "2", "5ms", never),
        ("q", "fq", str(index), "1", "alice", "2001-09-09T01:46:40.875Z", "1", "0", "0s",
         never),
        ("exempt", "exempt", "-1", "-1", "", "2001-09-09T01:46:40.875Z", "1", "0", "0s",
         "2001-09-09T01:46:40.875Z"),
    }  # fmt: skip
    assert first.state == second.state == WAITING


def test_dump_requests_with_details() -> None:
    c, _ = make()
    c.start(c.classify(ALICE), WorkEstimate(), descr=ALICE)
    c.start(c.classify(ROOT), WorkEstimate(), descr=ROOT)
    c.start(c.classify(ROOT), WorkEstimate())  # no digest: empty detail cells
    lines = dump_requests(c, include_details=True).splitlines()
    header = [cell.strip() for cell in lines[0].split(",")]
    assert header[10:] == [
        "UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion", "Resource",
        "SubResource",
    ]  # fmt: skip
    details = sorted(tuple(cell.strip() for cell in line.split(","))[10:] for line in lines[1:])
    assert details == [
        ("", "", "", "", "", "", "", ""),
        ("alice", "list", "/apis/apps/v1/namespaces/ns1/deployments", "ns1", "", "apps/v1",
         "deployments", ""),
        ("root", "get", "/api/v1/namespaces/default/pods/log", "default", "", "v1", "pods",
         "log"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("unix", "text"),
    [
        (0.0, "1970-01-01T00:00:00Z"),
        (EPOCH + 0.5, "2001-09-09T01:46:40.5Z"),
        (1.000000001, "1970-01-01T00:00:01.000000001Z"),
        (1.9999999999, "1970-01-01T00:00:02Z"),  # rounds up into the next second
    ],
)
def test_rfc3339_nano(unix: float, text: str) -> None:
    c, _ = make()
    c.start(c.classify(ROOT), WorkEstimate())
    row = dump_requests(c, to_wall=lambda _: unix).splitlines()[1]
    assert row.endswith(text)
