"""FlowControlMiddleware wrapping an application in the same process (the sidecar pattern)."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.asgi.describe import DIGEST_KEY
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.flowcontrol.clock import AsyncioEventClock
from gateway.flowcontrol.controller import FlowController
from tests.frontdoor.conftest import ServerThread


async def whoami(request: Request) -> JSONResponse:
    digest = request.scope[DIGEST_KEY]
    return JSONResponse({"user": digest.user.name, "verb": digest.info.verb,
                         "resource": digest.info.resource})  # fmt: skip


def make_app(loop: asyncio.AbstractEventLoop) -> FlowControlMiddleware:
    app = Starlette(routes=[Route("/api/v1/namespaces/{ns}/pods", whoami)])
    return FlowControlMiddleware(
        app,
        controller=lambda: FlowController(clock=AsyncioEventClock()),
    )


def test_wraps_a_starlette_app() -> None:
    server = ServerThread(make_app).start()
    try:
        r = httpx.get(server.url + "/api/v1/namespaces/default/pods")
        assert r.status_code == 200
        assert r.json() == {"user": "system:anonymous", "verb": "list", "resource": "pods"}
        assert r.headers["x-kubernetes-pf-flowschema-uid"]
        assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
    finally:
        server.stop()
