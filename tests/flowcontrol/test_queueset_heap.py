"""The queue set chooses the next queue from a heap with stale entries; Kubernetes scans every
queue. Run the same random traffic (with ties, cancellations, reconfigurations and epoch
advances) through both and require identical effects, so a wrong tie-break or a stale entry
taken for a live one shows up as a difference."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, Queue, QueueSet
from gateway.flowcontrol.stats import FlowStats
from gateway.testing import FakeEventClock
from tests.flowcontrol.test_queueset_fast_path import Run
from tests.flowcontrol.test_queueset_properties import (
    advance,
    arrive,
    cancel,
    finish,
)
from tests.support.examples import examples


class ScanQueueSet(QueueSet):
    """Kubernetes' ``findDispatchQueueToBoundLocked``: scan every queue from just after the
    last one served; the first smallest virtual finish wins."""

    def _find_dispatch_queue(self) -> Queue | None:
        queues = self.queues
        best: Queue | None = None
        best_finish = 0
        for i in range(len(queues)):
            queue = queues[(self.robin_index + 1 + i) % len(queues)]
            head = queue.head()
            if head is None:
                continue
            finish_r = queue.next_dispatch_r + head.total_work
            if best is None or finish_r < best_finish:
                best, best_finish = queue, finish_r
        if best is None:
            return None
        head = best.head()
        assert head is not None
        if not self.can_accommodate(head.max_seats):
            head.flow_stats.no_accommodation += 1
            return None
        return best


def _do(run: Run, op: tuple[Any, ...]) -> None:
    qs = run.qs
    if op[0] == "reconfigure":
        _, queues, limit = op
        hand = min(qs.hand_size or 1, queues) if queues > 0 else 0
        qs.configure(
            desired_num_queues=queues,
            queue_length_limit=qs.queue_length_limit or 3,
            hand_size=hand,
            concurrency_limit=limit,
        )
    elif op[0] == "epoch":
        qs.sync_time()
        qs._advance_epoch()
    else:
        run.do(op)


@st.composite
def crowded_configs(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """Few seats, long queues: most arrivals wait, so most dispatches choose among queues."""
    queues = draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
    return (
        queues,
        draw(st.integers(1, min(queues, 3))),
        draw(st.integers(2, 10)),
        draw(st.integers(1, 3)),
    )


narrow_arrive = st.tuples(
    st.just("arrive"),
    st.sampled_from([1, 1, 1, 2, 3]),  # equal widths make equal virtual finishes (ties)
    st.sampled_from([0, 0, 1]),
    st.sampled_from([0.0, 0.0, 0.05]),
    st.integers(0, 2**64 - 1),
    st.sampled_from([None, None, 0.1, 0.5]),
)
reconfigure = st.tuples(st.just("reconfigure"), st.sampled_from([1, 2, 3, 5, 8]), st.integers(1, 4))
epoch = st.tuples(st.just("epoch"))
same_instant = st.tuples(st.just("advance"), st.just(0.0))
heap_operations = st.lists(
    st.one_of(
        narrow_arrive,
        narrow_arrive,
        narrow_arrive,
        arrive,
        finish,
        finish,
        finish,
        cancel,
        advance,
        same_instant,
        reconfigure,
        epoch,
    ),
    min_size=10,
    max_size=120,
)


@settings(max_examples=examples(400), deadline=None)
@given(crowded_configs(), heap_operations)
def test_heap_dispatch_matches_kubernetes_scan(
    config: tuple[int, int, int, int], ops: list[tuple[Any, ...]]
) -> None:
    heap, scan = Run(config, True), Run(config, True, ScanQueueSet)
    for op in ops:
        _do(heap, op)
        _do(scan, op)
        assert heap.snapshot() == scan.snapshot(), op
    # Drain: every waiting request is dispatched, one finish at a time.
    for _ in range(len(heap.reqs)):
        _do(heap, ("finish", 0))
        _do(scan, ("finish", 0))
        assert heap.snapshot() == scan.snapshot()
    heap.clock.run_all()
    scan.clock.run_all()
    assert heap.snapshot() == scan.snapshot()


def test_ties_go_round_robin_despite_duplicate_entries() -> None:
    """Queues 2, 0, 1 tie in virtual finish; each queue's entry is pushed again with the
    same key (as a finish or cancel that changes nothing does): every queue is still served
    once, in round-robin order from just after the last queue served."""
    clock = FakeEventClock()
    qs = QueueSet(
        "pl", clock, desired_num_queues=4, queue_length_limit=10, hand_size=1, concurrency_limit=1
    )
    stats = FlowStats()
    blocker = qs.start_request(WorkEstimate(1), 3, stats, "fs")
    reqs = [qs.start_request(WorkEstimate(1), i, stats, "fs") for i in (2, 0, 1)]
    assert [r.queue.index if r.queue else -1 for r in reqs] == [2, 0, 1]
    order: list[int] = []
    for r in reqs:
        r.on_decided = lambda r: order.append(r.queue.index if r.queue else -9)
    for queue in qs.queues:
        qs._push(queue)
        qs._push(queue)
    assert qs.robin_index == 3
    qs.finish(blocker)
    for _ in range(3):
        running = [r for r in reqs if r.state == EXECUTING]
        assert len(running) == 1
        qs.finish(running[0])
    assert order == [0, 1, 2]
    assert qs.is_idle


def test_queue_removed_once_although_two_requests_release_late() -> None:
    """Two requests of a surplus queue hold seats past their finish: the first release
    removes the queue; the second must not remove another queue (its waiters would be
    stranded, never dispatched)."""
    run = Run((1, 1, 2, 1), True)
    ops: list[tuple[Any, ...]] = [
        ("arrive", 1, 0, 0.05, 0, None),
        ("finish", 0),
        ("finish", 0),
        ("arrive", 1, 0, 0.0, 0, None),
        ("reconfigure", 3, 1),
        ("arrive", 2, 0, 0.0, 1, None),
        ("reconfigure", 1, 2),
    ]
    for op in ops:
        _do(run, op)
    for _ in range(len(run.reqs)):
        _do(run, ("finish", 0))
    run.clock.run_all()
    for _ in range(len(run.reqs)):
        _do(run, ("finish", 0))
    assert run.qs.is_idle
    assert all(r.state == 3 for r in run.reqs)  # FINISHED
