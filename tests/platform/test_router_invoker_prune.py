"""The invoker's per-action bookkeeping (revision seen, acquires in flight, last refusal, proxy
hint, waiting requests) is dropped for actions with nothing on this router, so it does not
grow with every action ever invoked (issue 21 follow-up). The lease loop calls ``prune``; the
invoker here never talks to a manager (nothing is acquired)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from gateway.router.invoker import Invoker, InvokerSettings, Throttled
from gateway.router.manager_client import ManagerClient
from gateway.router.pool import WarmContainer
from gateway.testing import FakeEventClock


async def test_prune_keeps_only_actions_with_containers_waiters_or_acquires() -> None:
    async with aiohttp.ClientSession() as http:
        invoker = Invoker(
            InvokerSettings("r1"), FakeEventClock(), ManagerClient("http://127.0.0.1:9", http), http
        )
        invoker.pool.add(WarmContainer("c1", "ns/held@0.0.2", "http://127.0.0.1:9", 1))
        waiting: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        invoker._futures = {"ns/waiting@0.0.1": {waiting: False}, "ns/gone@0.0.1": {}}  # type: ignore[dict-item]
        invoker._pending = {"ns/acquiring@0.0.1": 1, "ns/gone@0.0.1": 0, "ns/held@0.0.1": 0}
        invoker._rejected = {
            "ns/gone@0.0.1": Throttled("quota"),
            "ns/waiting@0.0.1": Throttled("q"),
        }
        invoker._versions = {
            f"ns/{name}": "0.0.1" for name in ("held", "waiting", "acquiring", "gone", "other")
        }
        now = time.monotonic()
        invoker._proxies = {"ns/gone@0.0.1": (["u"], now - 1), "ns/fresh@0.0.1": (["u"], now + 60)}

        invoker.prune()

        assert set(invoker._versions) == {"ns/held", "ns/waiting", "ns/acquiring"}
        assert set(invoker._futures) == {"ns/waiting@0.0.1"}
        assert set(invoker._pending) == {"ns/acquiring@0.0.1", "ns/held@0.0.1"}
        assert set(invoker._rejected) == {"ns/waiting@0.0.1"}
        assert set(invoker._proxies) == {"ns/fresh@0.0.1"}  # a hint lives out its 2 s

        invoker.pool.discard("c1")
        waiting.cancel()
        invoker._futures["ns/waiting@0.0.1"].clear()
        invoker._pending["ns/acquiring@0.0.1"] = 0
        invoker.prune()
        assert not invoker._versions and not invoker._futures
        assert not invoker._pending and not invoker._rejected
