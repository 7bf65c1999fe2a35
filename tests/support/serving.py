"""A uvicorn server started in a test's event loop."""

from __future__ import annotations

import asyncio

import uvicorn

from tests.support.wait import async_wait_until


async def started_port(
    server: uvicorn.Server,
    serving: asyncio.Future[None],
    timeout: float = 10.0,  # noqa: ASYNC109 - the polling bound
) -> int:
    """The port ``server`` (its ``serve()`` running as ``serving``) listens on, once it does:
    uvicorn has no started event, so this polls. Whatever ended ``serving`` first is raised."""
    await async_wait_until(lambda: server.started or serving.done(), timeout, "uvicorn to start")
    if not server.started:
        serving.result()
        raise AssertionError("uvicorn stopped before it started")
    return int(server.servers[0].sockets[0].getsockname()[1])
