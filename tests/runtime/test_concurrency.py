"""Intra-container concurrency: C runs at once when allowed, strictly one at a time otherwise.

Overlap is proven by a barrier inside the action (it only opens when C calls are inside
``main`` together) and by the action's own enter/leave timestamps; no wall-clock tolerances.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import textwrap

import httpx

from .conftest import StartRuntime

SYNC_BARRIER = """
    import threading, time
    from gateway.runtime.context import getenv
    barrier = threading.Barrier({parties}, timeout=20)
    lock = threading.Lock()
    inflight = 0
    peak = 0
    def main(a):
        global inflight, peak
        with lock:
            inflight += 1
            peak = max(peak, inflight)
        enter = time.monotonic()
        barrier.wait()
        aid = getenv("__OW_ACTIVATION_ID")
        leave = time.monotonic()
        with lock:
            inflight -= 1
        return {{"enter": enter, "leave": leave, "aid": aid, "peak": peak}}
"""


async def run_many(base_url: str, code: str, count: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        init = await client.post("/init", json={"value": {"code": textwrap.dedent(code)}})
        assert init.status_code == 200, init.text
        return await asyncio.gather(
            *(
                client.post("/run", json={"value": {}, "activation_id": f"act{i}"})
                for i in range(count)
            )
        )


async def test_sync_main_runs_c_at_once(start_runtime: StartRuntime) -> None:
    url = start_runtime("--concurrency", "3")
    responses = await run_many(url, SYNC_BARRIER.format(parties=3), 3)
    results = [r.json() for r in responses]
    assert all(r.status_code == 200 for r in responses), results
    # every call entered before any left: three were inside main together
    assert max(r["enter"] for r in results) < min(r["leave"] for r in results)
    # each run saw its own activation id although os.environ is shared
    assert sorted(r["aid"] for r in results) == ["act0", "act1", "act2"]


async def test_concurrency_is_bounded_by_c(start_runtime: StartRuntime) -> None:
    url = start_runtime("--concurrency", "2")
    responses = await run_many(url, SYNC_BARRIER.format(parties=2), 6)
    results = [r.json() for r in responses]
    assert all(r.status_code == 200 for r in responses), results
    assert max(r["peak"] for r in results) == 2


async def test_default_serialises_runs(start_runtime: StartRuntime) -> None:
    code = """
        import time, threading
        lock = threading.Lock()
        inflight = 0
        def main(a):
            global inflight
            with lock:
                inflight += 1
                seen = inflight
            enter = time.monotonic()
            time.sleep(0.02)  # gives overlapping calls a chance to show up
            leave = time.monotonic()
            with lock:
                inflight -= 1
            return {"seen": seen, "enter": enter, "leave": leave}
    """
    env = {k: v for k, v in os.environ.items() if k != "__OW_ALLOW_CONCURRENT"}
    responses = await run_many(start_runtime(env=env), code, 4)
    results = sorted((r.json() for r in responses), key=lambda r: r["enter"])
    assert [r["seen"] for r in results] == [1, 1, 1, 1]
    for earlier, later in itertools.pairwise(results):
        assert earlier["leave"] <= later["enter"]


async def test_async_main_awaited_concurrently(start_runtime: StartRuntime) -> None:
    code = """
        import asyncio, time
        from gateway.runtime.context import getenv
        barrier = None
        async def main(a):
            global barrier
            if barrier is None:
                barrier = asyncio.Barrier(3)
            enter = time.monotonic()
            await asyncio.wait_for(barrier.wait(), 20)
            return {"enter": enter, "leave": time.monotonic(),
                    "aid": getenv("__OW_ACTIVATION_ID")}
    """
    env = {**os.environ, "__OW_ALLOW_CONCURRENT": "true"}
    responses = await run_many(start_runtime(env=env), code, 3)
    results = [r.json() for r in responses]
    assert all(r.status_code == 200 for r in responses), results
    assert max(r["enter"] for r in results) < min(r["leave"] for r in results)
    assert sorted(r["aid"] for r in results) == ["act0", "act1", "act2"]
