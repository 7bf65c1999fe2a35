"""FlowControlMiddleware wrapping an application in the same process (the sidecar pattern)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.sync.client import connect

from gateway.apfconfig import bootstrap
from gateway.asgi.context import request_context
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.clock import AsyncioEventClock
from gateway.flowcontrol.controller import FlowController
from gateway.settings.sources import load_config
from tests.frontdoor.conftest import ServerThread


def default_controller() -> FlowController:
    """Kubernetes' bootstrap objects, as a sidecar user without a config file builds them."""
    return FlowController(
        clock=AsyncioEventClock(), config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
    )


CONFIG = str(Path(__file__).with_name("apf_config.yaml"))


async def whoami(request: Request) -> JSONResponse:
    context = request_context(request.scope)
    assert context is not None  # set by admission
    digest = context.digest
    return JSONResponse({"user": digest.user.name, "verb": digest.info.verb,
                         "resource": digest.info.resource})  # fmt: skip


def make_app(loop: asyncio.AbstractEventLoop) -> FlowControlMiddleware:
    app = Starlette(routes=[Route("/api/v1/namespaces/{ns}/pods", whoami)])
    return FlowControlMiddleware(
        app,
        controller=lambda: FlowController(
            clock=AsyncioEventClock(), config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
        ),
    )


def test_wraps_a_starlette_app() -> None:
    server = ServerThread(make_app).start()
    try:
        r = httpx.get(server.url + "/api/v1/namespaces/default/pods")
        assert r.status_code == 200
        assert r.json() == {"user": "system:anonymous", "verb": "list", "resource": "pods"}
        assert r.headers["x-kubernetes-pf-flowschema-uid"]
        assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
        # The controller it built on first use gets its borrowing adjuster too.
        middleware: FlowControlMiddleware = server.app
        assert middleware.adjuster is not None and middleware.adjuster.running
        assert middleware.adjuster.period == 10.0
    finally:
        server.stop()


def make_ws_app(loop: asyncio.AbstractEventLoop) -> FlowControlMiddleware:
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        async for text in ws.iter_text():
            await ws.send_text(text)

    flow = load_config([CONFIG], {"upstreams": [{"url": "http://127.0.0.1:1"}]}).flow
    app = Starlette(routes=[Route("/queue/x", whoami_plain), WebSocketRoute("/queue/ws", echo)])
    return FlowControlMiddleware(
        app,
        controller=lambda: FlowController(
            clock=AsyncioEventClock(),
            server_concurrency_limit=3,
            config=flow,
            mandatory=bootstrap.mandatory(),
        ),
    )


async def whoami_plain(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


def test_websocket_holds_its_seat_only_for_the_handshake() -> None:
    server = ServerThread(make_ws_app).start()
    try:
        # tiny-queue has one seat; an open websocket must not keep it.
        with connect(f"ws://127.0.0.1:{server.port}/queue/ws") as ws:
            ws.send("hello")
            assert ws.recv(timeout=3) == "hello"
            r = httpx.get(server.url + "/queue/x", timeout=3)
            assert r.status_code == 200
            assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
            mw: FlowControlMiddleware = server.app
            qs = mw.controller.levels["tiny-queue"].qs
            assert server.call(lambda: qs.tot_requests_executing) == 0
    finally:
        server.stop()


# The documented sidecar set-up (docs/frontdoor.md): ``app.add_middleware(...)`` in a Starlette
# and a FastAPI app, served by uvicorn with lifespan on, as an application would run.
def _admitted(server: ServerThread) -> None:
    r = httpx.get(server.url + "/api/v1/namespaces/default/pods")
    assert r.status_code == 200
    assert r.json() == {"user": "system:anonymous", "verb": "list", "resource": "pods"}
    assert r.headers["x-kubernetes-pf-flowschema-uid"]
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
    missing = httpx.get(server.url + "/api/v1/namespaces/default/nothing-here")
    assert missing.status_code == 404  # the app's own answer, after admission
    assert missing.headers["x-kubernetes-pf-prioritylevel-uid"]


def test_added_to_a_starlette_app_with_add_middleware() -> None:
    started: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started.append("starlette")
        yield

    def make(loop: asyncio.AbstractEventLoop) -> Starlette:
        app = Starlette(routes=[Route("/api/v1/namespaces/{ns}/pods", whoami)], lifespan=lifespan)
        app.add_middleware(FlowControlMiddleware, controller=default_controller)
        return app

    server = ServerThread(make, lifespan="on").start()
    try:
        assert started == ["starlette"]  # lifespan passed through the middleware
        _admitted(server)
    finally:
        server.stop()


def test_added_to_a_fastapi_app_with_add_middleware() -> None:
    started: list[str] = []

    def make(loop: asyncio.AbstractEventLoop) -> FastAPI:
        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            started.append("fastapi")
            yield

        app = FastAPI(lifespan=lifespan)
        app.add_middleware(FlowControlMiddleware, controller=default_controller)

        @app.get("/api/v1/namespaces/{ns}/pods")
        async def pods(ns: str, request: Request) -> dict[str, str]:
            digest = request_context(request.scope).digest
            return {"user": digest.user.name, "verb": digest.info.verb,
                    "resource": digest.info.resource}  # fmt: skip

        return app

    server = ServerThread(make, lifespan="on").start()
    try:
        assert started == ["fastapi"]
        _admitted(server)
    finally:
        server.stop()
