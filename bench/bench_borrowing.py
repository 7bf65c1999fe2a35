"""Borrowing adjuster cost per period (8 and 100 levels) and work-estimator cost per request.

Run by hand: ``.venv/bin/python bench/bench_borrowing.py``. Baselines are measured in the same
run: a no-op estimator call for the estimator, and the 8-level adjuster for the 100-level one.
"""

from __future__ import annotations

import statistics
import sys
import time

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.controller import FlowController, SimpleObjectSet
from gateway.flowcontrol.digest import RequestDigest, RequestInfo, UserInfo
from gateway.flowcontrol.workestimate import WorkEstimator
from gateway.testing import FakeEventClock
from tests.flowcontrol.borrow_harness import limited_pl, user_fs


def controller(levels: int) -> tuple[FlowController, FakeEventClock]:
    pls = [limited_pl(f"pl{i}", 10 + i, lendable=50) for i in range(levels)]
    fss = [user_fs(f"fs{i}", f"u{i}", f"pl{i}") for i in range(levels)]
    clock = FakeEventClock()
    return FlowController(
        clock=clock,
        server_concurrency_limit=600,
        config=SimpleObjectSet(tuple(fss), tuple(pls)),
        mandatory=bootstrap.mandatory(),
    ), clock


def time_adjustment(levels: int, rounds: int = 200) -> list[float]:
    ctl, clock = controller(levels)
    # Give every level some demand history so the solver hits its bound-constrained branch.
    for i, level in enumerate(ctl.levels.values()):
        level.qs.demand.hold(float(i % 7) * 3, 5.0)
    samples = []
    for _ in range(rounds):
        clock.advance(10.0)
        t0 = time.perf_counter_ns()
        ctl.update_borrowing()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return samples


def time_estimator(n: int = 200_000) -> tuple[float, float, float]:
    est = WorkEstimator(now=lambda: 0.0)
    user = UserInfo("alice", ("system:authenticated",))
    get = RequestDigest(
        user,
        RequestInfo(
            True, "/api/v1/namespaces/a/pods/p", "get", resource="pods", namespace="a", name="p"
        ),
    )
    lst = RequestDigest(
        user, RequestInfo(True, "/api/v1/namespaces/a/pods", "list", resource="pods", namespace="a")
    )
    est.observe_list(lst, 500, 500 * 3000)

    def loop(fn: object, arg: RequestDigest) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(arg, 0)  # type: ignore[operator]
        return (time.perf_counter_ns() - t0) / n

    def noop(d: RequestDigest, cap: int) -> None:
        return None

    base = statistics.median(loop(noop, get) for _ in range(5))
    common = statistics.median(loop(est.estimate, get) for _ in range(5))
    listing = statistics.median(loop(est.estimate, lst) for _ in range(5))
    return base, common, listing


def main() -> None:
    print(f"Python {sys.version.split()[0]}")
    for levels in (8, 100):
        s = time_adjustment(levels)
        print(
            f"adjustment, {levels:3d} levels: median {statistics.median(s):8.1f} us  "
            f"min {min(s):8.1f}  max {max(s):8.1f}"
        )
    base, common, listing = time_estimator()
    print(
        f"estimator: no-op call {base:.0f} ns; get (common case) {common:.0f} ns "
        f"(+{common - base:.0f} ns); list with learned count {listing:.0f} ns"
        f" (+{listing - base:.0f} ns)"
    )


if __name__ == "__main__":
    main()
