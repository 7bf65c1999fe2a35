"""``running_task`` is ``asyncio.current_task()``, and the task admission takes from it is the
request's own: under plain uvicorn (the sidecar), a deadline cancels the application's task."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.apfconfig import bootstrap
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.flowcontrol.controller import FlowController
from gateway.http.running import running_task
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread
from tests.support.wait import wait_for


def test_it_is_current_task_in_every_task_and_fails_outside_a_loop() -> None:
    async def seen() -> tuple[object, object]:
        await asyncio.sleep(0)  # after a suspension too
        return running_task(), asyncio.current_task()

    async def scenario() -> None:
        tasks = [asyncio.create_task(seen()) for _ in range(3)]
        for task in tasks:
            mine, current = await task
            assert mine is task and current is task
        assert running_task() is asyncio.current_task()  # asyncio.run's own task

    asyncio.run(scenario())
    with pytest.raises(RuntimeError):
        running_task()


def test_a_deadline_cancels_the_application_task_under_uvicorn() -> None:
    clock = FakeEventClock(start=1000.0)
    tasks: list[asyncio.Task[object] | None] = []
    cancelled = threading.Event()

    async def slow(request: Request) -> JSONResponse:
        tasks.append(asyncio.current_task())
        try:
            await asyncio.Event().wait()  # until the deadline cancels it
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return JSONResponse({})  # pragma: no cover - never reached

    def make_app(loop: asyncio.AbstractEventLoop) -> FlowControlMiddleware:
        app = Starlette(routes=[Route("/api/v1/namespaces/{ns}/pods", slow)])
        controller = FlowController(
            clock=clock, config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
        )
        return FlowControlMiddleware(app, controller=controller)

    server = ServerThread(make_app).start()
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                httpx.get, server.url + "/api/v1/namespaces/default/pods", timeout=10
            )
            task = wait_for(lambda: tasks[0] if tasks else None, what="the handler to start")
            assert task is not None
            server.call(lambda: clock.advance(61.0))  # past requestTimeout (60 s)
            response = pending.result(timeout=10)
        assert response.status_code == 504
        assert cancelled.is_set() and task.done()
    finally:
        server.stop()
