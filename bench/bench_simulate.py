"""``apf-gateway simulate`` speed: CPU per simulated request, and its overhead over the bare engine.

Run by hand: ``.venv/bin/python bench/bench_simulate.py``. Workload: 60 s of virtual time,
three open-loop clients at 100 requests/s each in one queued level (18,000 requests) plus the
``busy-cluster`` example. Baseline, measured in the same run and interleaved A B A B: a bare
driver that replays the same arrival times through ``FlowController.start``/``finish`` on the
same fake clock, with the borrowing adjuster but no bookkeeping: the engine's own share.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.borrowing import BorrowingAdjuster
from gateway.flowcontrol.controller import FlowController
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, WAITING
from gateway.simulate import load_traffic, parse_traffic, simulate, to_json
from gateway.simulate.describe import digest_for
from gateway.testing import FakeEventClock

ROUNDS = 5
CONFIG = bootstrap.defaults()
TRAFFIC = parse_traffic(
    {
        "duration": "60s",
        "clients": [
            {
                "name": f"c{i}",
                "user": f"user{i}",
                "verb": "get",
                "path": f"/api/v1/namespaces/ns{i}/pods/p",
                "rate": "100/s",
                "serviceTime": "300ms",
            }
            for i in range(3)
        ],
    },
    "bench",
)
EXAMPLE = load_traffic(Path(__file__).parents[1] / "config/examples/traffic/busy-cluster.yaml")


def run_simulator(traffic: Any) -> int:
    data = to_json(simulate(traffic, CONFIG))
    return sum(c["calls"] for c in data["clients"].values())


def run_bare() -> int:
    clock = FakeEventClock()
    ctl = FlowController(clock=clock, config=CONFIG, mandatory=bootstrap.mandatory())
    work = WorkEstimate()
    counts = [0]

    def client(index: int) -> None:
        spec = TRAFFIC.clients[index]
        digest = digest_for(spec)
        cls = ctl.classify(digest)
        rng = random.Random(f"{TRAFFIC.seed}/{spec.name}/0")
        service, rate = spec.service_time, spec.rate

        def arrive() -> None:
            counts[0] += 1
            req = ctl.start(cls, work, wait_deadline=clock.now() + 15.0, descr=digest)

            def done() -> None:
                ctl.finish(cls, req)

            if req.state == EXECUTING:
                clock.call_later(service, done)
            elif req.state == WAITING:
                req.on_decided = lambda r: clock.call_later(service, done)
            following = clock.now() + rng.expovariate(rate)
            if following < TRAFFIC.duration:
                clock.call_at(following, arrive)

        clock.call_at(rng.expovariate(rate), arrive)

    for i in range(len(TRAFFIC.clients)):
        client(i)
    BorrowingAdjuster(ctl, clock).start()
    clock.run_until(TRAFFIC.duration)
    return counts[0]


def cpu(fn: Any, *args: Any) -> tuple[float, int]:
    t0 = time.process_time()
    n = fn(*args)
    return time.process_time() - t0, n


def main() -> None:
    sim, bare, example = [], [], []
    n_sim = n_bare = n_example = 0
    for _ in range(ROUNDS):
        t, n_sim = cpu(run_simulator, TRAFFIC)
        sim.append(t)
        t, n_bare = cpu(run_bare)
        bare.append(t)
        t, n_example = cpu(run_simulator, EXAMPLE)
        example.append(t)
    ratios = [s / b for s, b in zip(sim, bare, strict=True)]
    med = statistics.median
    print(f"Python {sys.version.split()[0]}, {ROUNDS} rounds, CPU seconds (median [min, max])")
    print("| workload | requests | CPU s | us/request | vs bare engine |")
    print("|---|---|---|---|---|")
    print(
        f"| bare engine driver, 3 x 100/s for 60 s | {n_bare} | {med(bare):.3f} "
        f"[{min(bare):.3f}, {max(bare):.3f}] | {med(bare) / n_bare * 1e6:.1f} | 1.00x |"
    )
    print(
        f"| simulate, same traffic | {n_sim} | {med(sim):.3f} [{min(sim):.3f}, {max(sim):.3f}] "
        f"| {med(sim) / n_sim * 1e6:.1f} "
        f"| {med(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}] |"
    )
    print(
        f"| simulate, busy-cluster.yaml (60 s) | {n_example} | {med(example):.3f} "
        f"[{min(example):.3f}, {max(example):.3f}] | {med(example) / n_example * 1e6:.1f} | - |"
    )


if __name__ == "__main__":
    main()
