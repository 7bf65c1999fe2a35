"""The manager's JSON HTTP API (loopback; routers and operators are its only clients).

See docs/platform.md, "Manager API", for the contract. Errors use the OpenWhisk shape
``{"error": ..., "code": ...}``. Every route but the probes and ``/metrics`` requires the
internal token (``gateway.platform.internal_token``) when the service has one (the CLI always
gives one).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.manager.core import ActionSpec, Container, UnknownRouter
from gateway.manager.policy import Reason
from gateway.manager.service import AcquireRejected, ManagerService
from gateway.platform.errors import error_body
from gateway.platform.internal_token import middleware

SERVICE = web.AppKey("service", ManagerService)
OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})  # everything else: token
log = logging.getLogger("gateway.manager")


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.Response(
        status=status, body=error_body(message), content_type="application/json", headers=headers
    )


def _containers(items: list[Container], *, secret: bool = True) -> list[dict[str, Any]]:
    """Answers to the owning router carry each container's secret; listings do not."""
    return [c.to_json(secret=secret) for c in items]


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json() if request.can_read_body else {}
    except json.JSONDecodeError as exc:
        raise web.HTTPBadRequest(body=error_body(f"body is not JSON: {exc}")) from exc
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(body=error_body("body must be a JSON object"))
    return data


async def register(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    data = await _body(request)
    if not isinstance(data.get("id"), str) or not isinstance(data.get("url"), str):
        return _error(400, "register needs 'id' and 'url'")
    incarnation = data.get("incarnation")
    held = service.core.register(
        data["id"],
        data["url"],
        data.get("holdings") or [],
        incarnation if isinstance(incarnation, str) else "",
    )
    log.info("router %s registered at %s with %d containers", data["id"], data["url"], len(held))
    return web.json_response(
        {"lease_seconds": service.core.settings.lease_seconds, "containers": _containers(held)}
    )


async def renew(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        held = service.core.renew(request.match_info["router"])
    except UnknownRouter:
        return _error(404, "unknown router: register again")
    return web.json_response(
        {"lease_seconds": service.core.settings.lease_seconds, "containers": _containers(held)}
    )


async def deregister(request: web.Request) -> web.Response:
    try:
        request.app[SERVICE].core.deregister(request.match_info["router"])
    except UnknownRouter:
        return _error(404, "unknown router")
    log.info("router %s deregistered; its containers are free", request.match_info["router"])
    return web.json_response({"ok": True})


async def router_containers(request: web.Request) -> web.Response:
    core = request.app[SERVICE].core
    return web.json_response(
        {"containers": _containers(core.assignments(request.match_info["router"]))}
    )


async def list_routers(request: web.Request) -> web.Response:
    core = request.app[SERVICE].core
    routers = [
        {"id": r.id, "url": r.url, "expires_in": r.expires - core.clock.now()}
        for r in core.routers.values()
    ]
    return web.json_response({"routers": routers})


async def acquire(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    data = await _body(request)
    try:
        action = ActionSpec.from_json(data["action"])
        router_id = str(data["router"])
        count = max(1, min(int(data.get("count", 1)), 64))
    except (KeyError, TypeError, ValueError) as exc:
        return _error(400, f"acquire needs 'router' and a valid 'action': {exc!r}")
    try:
        grant = await service.acquire(
            router_id,
            action,
            count=count,
            known=list(data.get("known") or []),
            allow_proxy=bool(data.get("allow_proxy", True)),
        )
    except UnknownRouter:
        return _error(404, "unknown router: register again")
    except AcquireRejected as exc:
        return _error(exc.status, str(exc), **{"Retry-After": "1"})
    return web.json_response(
        {
            "containers": _containers(grant.assigned),
            "proxy": [{"id": r.id, "url": r.url} for r in grant.proxy],
        }
    )


async def give_back(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    data = await _body(request)
    cid = request.match_info["container"]
    router, reason = str(data.get("router", "")), str(data.get("reason", "idle"))
    if not service.disruptions.give_back(router, cid, reason):
        return _error(404, f"container {cid} is not owned by that router")
    return web.json_response({"ok": True})


async def evict(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    data = await _body(request)
    cid = request.match_info["container"]
    try:
        reason = Reason(data.get("reason", "upgrade"))
    except ValueError:
        return _error(400, f"reason must be one of {[r.value for r in Reason]}")
    c = service.core.containers.get(cid)
    if c is None:
        return _error(404, f"no container {cid}")
    decision, result = await service.disruptions.disrupt(cid, reason)
    if result.outcome == "kept":
        return _error(409, f"{cid} was not removed: {result.why}")
    if decision.value == "refuse":
        return _error(
            429,
            f"Cannot evict {cid}: eviction.safe={c.action.eviction.value} does not allow "
            f"eviction for {reason.value}.",
        )
    if result.outcome == "waiting":
        return web.json_response(
            {"id": cid, "decision": decision.value, "waiting": result.why}, status=202
        )
    return web.json_response({"id": cid, "decision": decision.value})


async def drain(request: web.Request) -> web.Response:
    """Answers once every container is removed, kept, or only waiting for a running
    activation: 202 while some are (drain again for the current state), else 200."""
    data = await _body(request)
    service = request.app[SERVICE]
    decisions, results = await service.disruptions.drain(data.get("namespace"), data.get("action"))
    kept = {cid: r.why for cid, r in results.items() if r.outcome == "kept"}
    waiting = {cid: r.why for cid, r in results.items() if r.outcome == "waiting"}
    return web.json_response(
        {"drained": decisions, "kept": kept, "waiting": waiting}, status=202 if waiting else 200
    )


async def list_containers(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    stems = [h.id for hs in service.stems.values() for h in hs]
    return web.json_response(
        {
            "containers": _containers(list(service.core.containers.values()), secret=False),
            "stems": stems,
        }
    )


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[SERVICE].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def livez(request: web.Request) -> web.Response:
    """The process serves requests (liveness; also ``/healthz``)."""
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    ready, why = request.app[SERVICE].ready()
    return web.Response(status=200 if ready else 503, text=why + "\n")


def build_app(service: ManagerService) -> web.Application:
    token = service.settings.internal_token
    guard = [middleware(token, lambda path: path not in OPEN_PATHS)] if token else []
    app = web.Application(middlewares=guard)
    app[SERVICE] = service
    app.router.add_post("/v1/routers", register)
    app.router.add_get("/v1/routers", list_routers)
    app.router.add_put("/v1/routers/{router}/lease", renew)
    app.router.add_delete("/v1/routers/{router}", deregister)
    app.router.add_get("/v1/routers/{router}/containers", router_containers)
    app.router.add_post("/v1/acquire", acquire)
    app.router.add_get("/v1/containers", list_containers)
    app.router.add_post("/v1/containers/{container}/giveback", give_back)
    app.router.add_post("/v1/containers/{container}/evict", evict)
    app.router.add_post("/v1/drain", drain)
    app.router.add_get("/healthz", livez)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

    async def lifecycle(app: web.Application) -> Any:
        await service.start()
        yield
        await service.stop()

    async def stopping(app: web.Application) -> None:
        service.stopping = True

    app.on_shutdown.append(stopping)

    app.cleanup_ctx.append(lifecycle)
    return app
