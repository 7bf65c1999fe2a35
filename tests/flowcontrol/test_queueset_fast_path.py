"""The queue set's direct dispatch of an arrival when nothing waits must be indistinguishable
from the general enqueue-then-dispatch path: run the same random traffic through both."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, WAITING, QueueSet, Request
from gateway.flowcontrol.stats import FlowStats, Histogram
from gateway.testing import FakeEventClock
from tests.flowcontrol.test_queueset_properties import operations, queue_configs
from tests.support.examples import examples


class Run:
    def __init__(
        self, config: tuple[int, int, int, int], fast: bool, kind: type[QueueSet] = QueueSet
    ) -> None:
        queues, hand, qll, limit = config
        self.clock = FakeEventClock()
        self.qs = kind(
            "pl",
            self.clock,
            desired_num_queues=queues,
            queue_length_limit=qll,
            hand_size=hand,
            concurrency_limit=limit,
        )
        self.qs.fast_dispatch = fast
        self.stats = [FlowStats() for _ in range(3)]
        self.reqs: list[Request] = []
        self.decided: list[tuple[int, int]] = []

    def do(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "arrive":
            _, initial, final, latency, h, wait = op
            deadline = None if wait is None else self.clock.now() + wait
            req = self.qs.start_request(
                WorkEstimate(initial, final, latency),
                h,
                self.stats[h % 3],
                "fs",
                "",
                None,
                deadline,
            )
            index = len(self.reqs)
            req.on_decided = lambda r: self.decided.append((index, r.state))
            self.reqs.append(req)
        elif kind == "finish":
            running = [r for r in self.reqs if r.state == EXECUTING]
            if running:
                self.qs.finish(running[op[1] % len(running)])
        elif kind == "cancel":
            waiting = [r for r in self.reqs if r.state == WAITING]
            if waiting:
                self.qs.cancel(waiting[op[1] % len(waiting)], "cancelled")
        else:
            self.clock.advance(op[1])

    def snapshot(self) -> tuple[Any, ...]:
        qs = self.qs
        requests = [
            (r.state, r.reason, r.start_time, r.queue.index if r.queue else None, r.max_seats)
            for r in self.reqs
        ]
        queues = [
            (
                q.index,
                q.next_dispatch_r,
                q.n_waiting,
                q.seats_in_use,
                q.total_work_sum,
                q.max_seats_sum,
                len(q.executing),
                [r.state for r in q.waiting if r.state == WAITING],
            )
            for q in qs.queues
        ]
        counters = (
            qs.current_r, qs.robin_index, qs.enqueues, qs.active_queues, qs.tot_requests_waiting,
            qs.tot_seats_waiting, qs.tot_requests_executing, qs.tot_seats_in_use, qs.dispatched,
            qs.rejected, qs.cancelled, qs.dispatch_r, qs.latest_s, qs.demand.value,
            qs.demand.min, qs.demand.max, qs.segments.totals(),
        )  # fmt: skip
        stats = [_stats(s) for s in self.stats]
        return (requests, queues, counters, stats, list(self.decided))


def _hist(h: Histogram) -> tuple[Any, ...]:
    return (tuple(h.counts), h.sum, h.count)


def _stats(s: FlowStats) -> tuple[Any, ...]:
    return (
        s.dispatched, dict(s.rejected), s.inqueue_requests, s.inqueue_seats,
        s.executing_requests, s.executing_seats, s.no_accommodation,
        _hist(s.queue_length_after_enqueue), _hist(s.wait_seconds["true"]),
        _hist(s.wait_seconds["false"]), _hist(s.work_estimated_seats),
    )  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(queue_configs(), operations)
def test_direct_dispatch_matches_general_path(
    config: tuple[int, int, int, int], ops: list[tuple[Any, ...]]
) -> None:
    fast, general = Run(config, True), Run(config, False)
    for op in ops:
        fast.do(op)
        general.do(op)
        assert fast.snapshot() == general.snapshot(), op
    fast.clock.run_all()
    general.clock.run_all()
    assert fast.snapshot() == general.snapshot()
