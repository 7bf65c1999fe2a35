"""Flow-control core micro-benchmarks: admit + release, dispatch cost vs queues and flows,
memory per queued request.

Run by hand: ``.venv/bin/python bench/bench_core.py [--rounds 5] [--profile]``; results go to
``docs/performance.md`` ("Flow-control core"). Every cell is timed in batches (per-request cost
= batch time / batch size); cells are interleaved round by round and reported as the median of
the rounds (each round: the fastest batch) with min/max, next to a baseline measured in the
same round. Batches are timed in process CPU time (``time.process_time_ns``): on this shared
2-core machine wall time mostly measures other jobs' preemption.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import heapq
import itertools
import pstats
import statistics
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway.apfconfig import bootstrap
from gateway.clock import AsyncioEventClock
from gateway.flowcontrol.controller import FlowController, flow_hash
from gateway.flowcontrol.digest import RequestDigest, RequestInfo, UserInfo, WorkEstimate
from gateway.flowcontrol.queueset import QueueSet, Request
from gateway.flowcontrol.stats import FlowStats

W1 = WorkEstimate()


class MonotonicClock:
    """A real clock (as production's loop.time()); timers are kept but never fired here."""

    def __init__(self) -> None:
        self.now = time.monotonic
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        heapq.heappush(self._timers, (when, next(self._seq), callback))
        return _Timer()

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        return self.call_at(self.now() + delay, callback)


class _Timer:
    def cancel(self) -> None:
        pass


def digest(user: str, namespace: str = "ns1") -> RequestDigest:
    info = RequestInfo(
        is_resource_request=True,
        path=f"/api/v1/namespaces/{namespace}/pods",
        verb="list",
        api_version="v1",
        namespace=namespace,
        resource="pods",
    )
    return RequestDigest(UserInfo(user, ("system:authenticated",)), info)


Cell = Callable[[int], int]  # runs n requests, returns the elapsed ns of the timed part


def timed(body: Callable[[int], None]) -> Cell:
    def cell(n: int) -> int:
        t0 = time.process_time_ns()
        body(n)
        return time.process_time_ns() - t0

    return cell


def per_request_ns(fn: Cell, batch: int, batches: int) -> float:
    """Fastest of ``batches`` batches: (time for ``batch`` requests) / batch, in ns.

    The minimum (as ``timeit`` advises) because other jobs share the two cores: slower batches
    measure them (preemption, caches), not the code. Rounds report the median of these."""
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(batches):
            samples.append(fn(batch) / batch)
    finally:
        gc.enable()
    return min(samples)


# ---------------------------------------------------------------- 1. admit + release
def admit_release_cells() -> dict[str, Cell]:
    ctl = FlowController(
        clock=MonotonicClock(), config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
    )
    hit = digest("alice")
    assert ctl.classify(hit).priority_level == "global-default"
    misses = (digest(f"user-{i}") for i in itertools.count())
    classify, start, finish = ctl.classify, ctl.start, ctl.finish

    def cache_hit(n: int) -> None:
        for _ in range(n):
            c = classify(hit)
            finish(c, start(c, W1))

    def cache_miss(n: int) -> int:
        batch = list(itertools.islice(misses, n))  # new users: built outside the timed part
        t0 = time.process_time_ns()
        for d in batch:
            c = classify(d)
            finish(c, start(c, W1))
        return time.process_time_ns() - t0

    def classify_hit_only(n: int) -> None:
        for _ in range(n):
            classify(hit)

    cls = classify(hit)

    def start_finish_only(n: int) -> None:
        for _ in range(n):
            finish(cls, start(cls, W1))

    # Baseline: the cheapest possible limiter, a counting semaphore on plain ints.
    sem = {"in_use": 0, "limit": 600}

    def semaphore(n: int) -> None:
        for _ in range(n):
            if sem["in_use"] < sem["limit"]:
                sem["in_use"] += 1
            sem["in_use"] -= 1

    return {
        "baseline: counting semaphore": timed(semaphore),
        "classify (cache hit) only": timed(classify_hit_only),
        "start + finish only (global-default)": timed(start_finish_only),
        "classify hit + start + finish": timed(cache_hit),
        "classify miss + start + finish": cache_miss,
    }


# ---------------------------------------------------------------- 2. dispatch vs queues/flows
QUEUES = (8, 128, 1024)
FLOWS = (10, 1_000, 100_000)
HAND = 6
LIMIT = 50
BACKLOG = 2_000


def hashes(flows: int) -> list[int]:
    return [flow_hash("bench", f"user-{i}") for i in range(flows)]


def dispatch_cell(queues: int, flows: int, saturated: bool) -> Cell:
    clock = MonotonicClock()
    qs = QueueSet(
        "bench",
        clock,
        desired_num_queues=queues,
        queue_length_limit=1_000_000,
        hand_size=HAND,
        concurrency_limit=LIMIT,
    )
    stats = FlowStats()
    pool = hashes(flows)
    cycle = itertools.cycle(pool)
    start = qs.start_request
    finish = qs.finish
    # Steady state: every flow has been seen once, so its hand is dealt (a flow's first
    # request pays one deal, about 3.5 us, on top of the figures below).
    for h in pool:
        finish(start(W1, h, stats, "fs"))
    if not saturated:

        def uncontended(n: int) -> None:
            for h in itertools.islice(cycle, n):
                finish(start(W1, h, stats, "fs"))

        return timed(uncontended)
    # Saturated steady state: every seat busy and a backlog spread over the flows' queues;
    # one step = the oldest executing request finishes (dispatching a waiter) + one arrival.
    # Oldest first; a finished request is dropped, as in production (a list that kept every
    # dispatched request grew by ~500 B a step and made each new request fresh memory).
    executing: deque[Request] = deque()
    running = executing.append
    for h in itertools.islice(cycle, LIMIT + BACKLOG):
        req = start(W1, h, stats, "fs")
        req.on_decided = running
        if req.state == 1:
            running(req)
    assert qs.tot_requests_executing == LIMIT and qs.tot_requests_waiting == BACKLOG
    oldest = executing.popleft

    def steady(n: int) -> None:
        for h in itertools.islice(cycle, n):
            finish(oldest())
            req = start(W1, h, stats, "fs")
            req.on_decided = running

    return timed(steady)


# ---------------------------------------------------------------- 3. memory per queued request
def memory_per_request(n: int, variant: str) -> float:
    loop = asyncio.new_event_loop()
    try:
        clock: Any = AsyncioEventClock(loop) if variant != "bare" else MonotonicClock()
        qs = QueueSet(
            "mem",
            clock,
            desired_num_queues=128,
            queue_length_limit=1_000_000,
            hand_size=6,
            concurrency_limit=1,
        )
        stats = FlowStats()
        pool = hashes(1_000)
        qs.start_request(W1, pool[0], stats, "fs")  # takes the only seat
        for h in pool:  # warm the hand cache and the queues
            qs.cancel(qs.start_request(W1, h, stats, "fs"))
        keep: list[object] = []
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for i in range(n):
            deadline = loop.time() + 15.0 if variant != "bare" else None
            req = qs.start_request(W1, pool[i % len(pool)], stats, "fs", "", None, deadline)
            if variant == "admission":
                # What the asyncio shell adds while a request waits: a future and its callback.
                fut = loop.create_future()
                req.on_decided = lambda _r, f=fut: f.done() or f.set_result(None)
                keep.append(fut)
            keep.append(req)
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        assert qs.tot_requests_waiting == n
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        # The test's own list of references is not part of the cost.
        grown -= sys.getsizeof(keep)
        return grown / n
    finally:
        loop.close()


# ---------------------------------------------------------------- reporting
def fmt(values: list[float], scale: float = 1e3) -> str:
    med = statistics.median(values) / scale
    return f"{med:.2f} ({min(values) / scale:.2f}-{max(values) / scale:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the slowest cells")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, rounds={args.rounds}")

    # 1. admit + release
    cells = admit_release_cells()
    results: dict[str, list[float]] = {name: [] for name in cells}
    ratios: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(args.rounds):
        base = 0.0
        for name, fn in cells.items():
            value = per_request_ns(fn, 1_000, 100)
            results[name].append(value)
            if name.startswith("baseline"):
                base = value
            ratios[name].append(value / base)
    print("\n| operation | per request, us: median (min-max of rounds) | x baseline |")
    print("|---|---|---|")
    for name in cells:
        print(f"| {name} | {fmt(results[name])} | {statistics.median(ratios[name]):.1f} |")

    # 2. dispatch cost vs queues and flows
    for saturated in (False, True):
        grid = {(q, f): dispatch_cell(q, f, saturated) for q in QUEUES for f in FLOWS}
        cost: dict[tuple[int, int], list[float]] = {key: [] for key in grid}
        rel: dict[tuple[int, int], list[float]] = {key: [] for key in grid}
        for _ in range(args.rounds):
            base = 0.0
            for key, fn in grid.items():
                value = per_request_ns(fn, 500, 40)
                cost[key].append(value)
                if key == (QUEUES[0], FLOWS[0]):
                    base = value
                rel[key].append(value / base)
        mode = "saturated steady state (finish + arrival)" if saturated else "uncontended"
        print(f"\n{mode}: per request, us, median (min-max); x (8 queues, 10 flows)")
        print("| queues \\ flows | " + " | ".join(f"{f:,}" for f in FLOWS) + " |")
        print("|---|" + "---|" * len(FLOWS))
        for q in QUEUES:
            cells_txt = [f"{fmt(cost[q, f])}; {statistics.median(rel[q, f]):.2f}x" for f in FLOWS]
            print(f"| {q} | " + " | ".join(cells_txt) + " |")

    # 3. memory
    print("\n| queued request variant | bytes per request (median of rounds, min-max) |")
    print("|---|---|")
    variants = {
        "bare": "bare queued request (no wait deadline)",
        "timer": "+ wait deadline (one shared timer per queue set)",
        "admission": "+ timer + the admission shell's future and callback",
    }
    for code, title in variants.items():
        values = [memory_per_request(20_000, code) for _ in range(3)]
        print(f"| {title} | {fmt(values, 1.0)} |")

    if args.profile:
        for title, fn in (
            ("classify hit + start + finish", cells["classify hit + start + finish"]),
            ("saturated 1024 queues 100,000 flows", dispatch_cell(1024, 100_000, True)),
        ):
            print(f"\n--- cProfile: {title} (50,000 requests)")
            prof = cProfile.Profile()
            prof.runcall(fn, 50_000)
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
