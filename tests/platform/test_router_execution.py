"""A runtime that answers 503 (it got SIGTERM and is draining) is not an action failure."""

from __future__ import annotations

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.platform.actions import ActionInfo, validate_put
from gateway.router.activation import Status
from gateway.router.execution import SHUTTING_DOWN, Executor
from gateway.router.pool import PoolSettings, RouterPool, WarmContainer
from gateway.testing import FakeEventClock


class Events:
    def pause(self, c: WarmContainer) -> None: ...
    def give_back(self, c: WarmContainer, reason: str) -> None: ...
    def drained(self, c: WarmContainer) -> None: ...


async def test_a_stopping_runtime_is_a_platform_error_and_the_container_is_dropped() -> None:
    async def stopping(request: web.Request) -> web.Response:
        return web.json_response({"error": "The action runtime is shutting down."}, status=503)

    app = web.Application()
    app.router.add_post("/run", stopping)
    doc = validate_put("guest", "a", {"exec": {"kind": "python:3", "code": "x"}})
    action = ActionInfo.from_doc(doc)
    lost: list[tuple[str, str]] = []
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
        pool = RouterPool(FakeEventClock(), PoolSettings(), Events())
        container = WarmContainer("c-1", action.key, str(server.make_url("")).rstrip("/"), 1)
        container.initialized = True
        pool.add(container)
        slot = pool.reserve(action.key)
        assert slot is not None
        executor = Executor(http, pool, {}, lambda c, why: lost.append((c.id, why)))
        outcome = await executor.execute(slot, action, {}, "a" * 32, 0.0)
    assert outcome.status is Status.WHISK_ERROR
    assert outcome.result == {"error": SHUTTING_DOWN}
    assert lost == [("c-1", "failed")]
