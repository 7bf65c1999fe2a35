"""Memory a router keeps per action a tenant creates: the action cache and the per-action
metric series (issue 21 follow-up). Run by hand:

    .venv/bin/python bench/bench_action_cache.py [--small 20000] [--large 150] [--rounds 3]

A real ``Router`` over a real SQLite store (in a temporary directory) reads N stored actions
the way invokes do (``Router.action``), then its metrics see one activation of each
(``RouterMetrics.observe``); no manager, no containers. Two cases: ``--small`` actions of
~300 encoded bytes (the entry bound matters) and ``--large`` actions of 1 MiB of code (the byte
bound matters). Each case runs with the defaults (``--action-cache-bytes`` 64 MiB,
``--action-cache-entries`` 4096) and unbounded (what main did), alternating, ``--rounds`` times;
reported: Python heap growth (``tracemalloc``) of the cache, of the metrics, and the size of a
``/metrics`` scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import tracemalloc
from pathlib import Path

from prometheus_client import generate_latest

from gateway.platform.actions import ActionInfo
from gateway.router.activation import Outcome, Status
from gateway.router.app import Router, RouterSettings
from gateway.store import open_store

UNBOUNDED = 10**12


async def fill(db: str, count: int, code_bytes: int) -> None:
    router = Router(RouterSettings("bench", "http://127.0.0.1:1", db))
    store = open_store(db)
    await store.open()
    try:
        for i in range(count):
            code = f"# {'x' * code_bytes}\ndef main(args):\n    return {{'i': {i}}}\n"
            raw = json.dumps({"exec": {"kind": "python:3", "code": code}}).encode()
            doc = await router.parser.action_json("guest", f"a{i}", bytearray(raw), frozenset())
            await store.put_action_json("guest", f"a{i}", doc, overwrite=True)
    finally:
        await store.close()
        router.parser.close()


async def measure(db: str, count: int, bounded: bool) -> tuple[int, int, int, int]:
    """(cache heap bytes, metrics heap bytes, scrape bytes, entries cached)."""
    limits = {} if bounded else {"action_cache_bytes": UNBOUNDED, "action_cache_entries": 10**9}
    router = Router(RouterSettings("bench", "http://127.0.0.1:1", db, **limits))  # type: ignore[arg-type]
    router.store = open_store(db)
    await router.store.open()
    try:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):  # what the cache holds, nothing else
            await router.action("guest", f"a{i}")
        gc.collect()
        cached = tracemalloc.get_traced_memory()[0]
        for i in range(count):  # one activation of each: only the series stay
            info = ActionInfo(
                namespace="guest", name=f"a{i}", version="0.0.1", kind="python:3", code="",
                main="main", binary=False, parameters={}, logs_mb=10,
            )  # fmt: skip
            router.metrics.observe(info, Outcome(Status.SUCCESS, {}))
        del info
        gc.collect()
        observed = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        scrape = len(generate_latest(router.metrics.registry))
        return cached - before, observed - cached, scrape, len(router._cache)
    finally:
        await router.store.close()
        router.parser.close()


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}")
    print("| case | cache | entries held | cache heap MiB | metrics heap MiB | scrape MiB |")
    print("|---|---|---|---|---|---|")
    ratios: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, count, code in (
            (f"{args.small} actions of ~300 B", args.small, 0),
            (f"{args.large} actions of 1 MiB code", args.large, 1 << 20),
        ):
            db = f"sqlite:///{Path(tmp) / f'{count}-{code}.db'}"
            await fill(db, count, code)
            runs: dict[bool, list[tuple[int, int, int, int]]] = {True: [], False: []}
            for _ in range(args.rounds):
                for bounded in (False, True):
                    runs[bounded].append(await measure(db, count, bounded))
            for bounded in (False, True):
                rows = runs[bounded]
                med = [statistics.median(r[i] for r in rows) for i in range(4)]
                name = "defaults" if bounded else "unbounded (main)"
                print(
                    f"| {label} | {name} | {int(med[3])} | {mib(med[0])} | {mib(med[1])} | "
                    f"{mib(med[2])} |"
                )
            ratio = [b[0] / u[0] for b, u in zip(runs[True], runs[False], strict=True)]
            scrape = [b[2] / u[2] for b, u in zip(runs[True], runs[False], strict=True)]
            ratios.append(
                f"{label}: defaults/unbounded cache heap {statistics.median(ratio):.3f} "
                f"(min {min(ratio):.3f}, max {max(ratio):.3f}), scrape "
                f"{statistics.median(scrape):.3f}"
            )
    print("\n".join(ratios))


if __name__ == "__main__":
    asyncio.run(main())
