"""Wait deadlines share one clock timer per queue set; each request still times out at its own
deadline, and requests that were dispatched or cancelled first are left alone."""

from __future__ import annotations

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, REJECTED, WAITING, QueueSet, Request
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock


def test_each_request_times_out_at_its_own_deadline() -> None:
    clock = FakeEventClock()
    qs = QueueSet(
        "pl", clock, desired_num_queues=4, queue_length_limit=50, hand_size=1,
        concurrency_limit=1,
    )  # fmt: skip
    stats = FlowStats()
    running = qs.start_request(WorkEstimate(), 1, stats, "fs")
    assert running.state == EXECUTING
    ended: list[tuple[float, int]] = []
    waiting: list[Request] = []
    # Deadlines out of order: 5, 2, 8, 3 seconds from now.
    for i, deadline in enumerate((5.0, 2.0, 8.0, 3.0)):
        req = qs.start_request(WorkEstimate(), 2, stats, "fs", wait_deadline=deadline)
        assert req.state == WAITING
        req.on_decided = lambda r, i=i: ended.append((clock.now(), i))
        waiting.append(req)
    assert clock.pending == 1  # one timer for all four waits
    clock.run_until(2.5)
    assert ended == [(2.0, 1)]
    qs.cancel(waiting[3], "cancelled")  # leaves before its deadline (3 s)
    qs.finish(running)  # request 0 (oldest) is dispatched before its deadline
    assert waiting[0].state == EXECUTING
    clock.run_until(10.0)
    assert ended == [(2.0, 1), (2.5, 3), (2.5, 0), (8.0, 2)]
    assert [r.reason for r in waiting] == ["", "time-out", "time-out", "cancelled"]
    assert waiting[2].state == REJECTED
    assert stats.rejected["time-out"] == 2 and stats.rejected["cancelled"] == 1
    assert clock.pending == 0


def test_stale_deadline_entries_are_pruned() -> None:
    clock = FakeEventClock()
    qs = QueueSet(
        "pl", clock, desired_num_queues=8, queue_length_limit=1000, hand_size=2,
        concurrency_limit=1,
    )  # fmt: skip
    stats = FlowStats()
    held = qs.start_request(WorkEstimate(), 0, stats, "fs")
    for round_ in range(20):
        queued = [
            qs.start_request(WorkEstimate(), i, stats, "fs", wait_deadline=60.0 + round_)
            for i in range(10)
        ]
        for _ in queued:  # each waits, then runs to completion
            qs.finish(held)
            (held,) = [r for r in queued if r.state == EXECUTING]
    # 200 requests passed through the queue; only a bounded number of entries remain.
    assert len(qs._deadlines) <= 2 * 64
