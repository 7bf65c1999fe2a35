"""The OpenWhisk-compatible action API (``/api/v1/namespaces/{ns}/...``) and the platform
endpoint the manager calls (``/_platform/v1/containers/{id}/giveback``)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.platform.action_body import MALFORMED, parse_json
from gateway.platform.actions import ActionInfo
from gateway.platform.errors import (
    ALREADY_EXISTS,
    INTERNAL_ERROR,
    NOT_FOUND,
    ApiError,
    error_body,
    method_not_allowed,
    not_implemented,
)
from gateway.platform.ids import is_activation_id, new_activation_id
from gateway.router.app import (
    ACTIVATION_HEADER,
    ROUTER,
    STORE_UNAVAILABLE,
    URL,
    Router,
    lifecycle,
)
from gateway.router.bodies import MAX_PLATFORM_BYTES, read_buffer, read_limited, send_json
from gateway.router.invoker import ProxyTo, Throttled
from gateway.store import Conflict, StoreError
from gateway.store.outage import RETRY_AFTER, StoreUnavailable

log = logging.getLogger("gateway.router")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("gateway.router.api")
MAX_LIST = 200
DEFAULT_LIST = 30
MAX_EPOCH_MS = 2**63 - 1  # what the stores' integer columns hold
_TRUE = frozenset(("true", "yes", "on", "1"))
_FALSE = frozenset(("false", "no", "off", "0"))
_INT = re.compile(r"[+-]?[0-9]{1,11}")
FAILED = "The router could not run the activation."
SUMMARY_FIELDS = (
    "namespace",
    "name",
    "version",
    "publish",
    "annotations",
    "activationId",
    "start",
    "end",
    "duration",
)
MARK_DELAY = 0.05  # a blocking activation is marked in flight once it has run this long


def _json(data: Any, status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(data).encode(),
        content_type="application/json",
        headers=headers,
    )


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else {}
        return web.Response(
            status=exc.status,
            body=error_body(exc.message),
            content_type="application/json",
            headers=headers,
        )
    except StoreUnavailable:  # logged once per outage by the store guard, not per request
        return web.Response(
            status=503,
            body=error_body(STORE_UNAVAILABLE),
            content_type="application/json",
            headers={"Retry-After": str(RETRY_AFTER)},
        )
    except StoreError as exc:  # a broken store (e.g. a table gone): one line, no traceback
        log.error("%s %s failed: %s", request.method, request.path, exc)
        return web.Response(
            status=500, body=error_body(INTERNAL_ERROR), content_type="application/json"
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        keep = {}
        if isinstance(exc, web.HTTPMethodNotAllowed):
            message = method_not_allowed(exc.allowed_methods)
            keep["Allow"] = exc.headers["Allow"]
        elif exc.status == 404:
            message = NOT_FOUND
        else:
            message = exc.text or exc.reason
        return web.Response(
            status=exc.status, body=error_body(message), content_type="application/json",
            headers=keep,
        )  # fmt: skip
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return web.Response(
            status=500, body=error_body(INTERNAL_ERROR), content_type="application/json"
        )


def _context(request: web.Request) -> tuple[Router, Any, str]:
    router = request.app[ROUTER]
    identity = router.identify(request)
    return router, identity, identity.resolve(request.match_info["namespace"])


def _page(request: web.Request, collection: str) -> tuple[int, int]:
    """``limit`` (default 30, 0 means the maximum 200) and ``skip``, checked as OpenWhisk does."""
    found = {}
    for key, default in (("limit", DEFAULT_LIST), ("skip", 0)):
        given = request.query.get(key)
        if given is None:
            found[key] = default
            continue
        value = _java_int(given)
        if value is None:  # OpenWhisk's ``toInt``: 32-bit, so 2**63 is "not an integer" too
            problem = f"The value '{given}' is not an integer for {collection}."
        elif key == "limit" and not 0 <= value <= MAX_LIST:
            problem = (
                f"The value '{value}' is not in the range of 0 to {MAX_LIST} for {collection}."
            )
        elif value < 0:
            problem = f"The value '{value}' is not greater than or equal to 0 for {collection}."
        else:
            found[key] = value
            continue
        raise ApiError(400, f"The query parameter '{key}' was malformed:\n{problem}")
    return found["limit"] or MAX_LIST, found["skip"]


def _java_int(text: str) -> int | None:
    """``text`` as Java's ``Integer.parseInt`` reads it (ASCII digits, a sign, 32 bits), or
    None: OpenWhisk answers a value outside that range as "not an integer"."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def _flag(request: web.Request, name: str, default: bool) -> bool:
    """A boolean query parameter, read as OpenWhisk's (Akka's) parser reads it."""
    value = request.query.get(name)
    if value is None:
        return default
    word = value.lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ApiError(
        400, f"The query parameter '{name}' was malformed:\n'{value}' is not a valid Boolean value"
    )


# ---- actions -----------------------------------------------------------------------------
async def put_action(request: web.Request) -> web.StreamResponse:
    router, _, ns = _context(request)
    name = request.match_info["name"]
    raw = await read_buffer(request, router.settings.max_action_bytes)
    allowed = router.settings.allowed_pod_template_fields
    doc_json = await router.parser.action_json(ns, name, raw, allowed)
    overwrite = request.query.get("overwrite", "false").lower() == "true"
    try:  # stamped and stored as encoded: the answer is the stored text, never re-encoded
        stored = await router.store.put_action_json(ns, name, doc_json, overwrite=overwrite)
    except Conflict:
        raise ApiError(409, ALREADY_EXISTS) from None
    router.forget(ns, name)
    return await send_json(request, stored)


async def get_action(request: web.Request) -> web.StreamResponse:
    router, _, ns = _context(request)
    with_code = _flag(request, "code", True)
    text = await router.store.get_action_json(ns, request.match_info["name"])
    if text is None:
        raise ApiError(404, NOT_FOUND)
    doc = await router.parser.loads(text)
    if not with_code:  # OpenWhisk's ?code=false: the exec's metadata only
        doc["exec"] = {k: v for k, v in (doc.get("exec") or {}).items() if k != "code"}
    return await send_json(request, await router.parser.dumps(doc))


async def delete_action(request: web.Request) -> web.Response:
    router, _, ns = _context(request)
    name = request.match_info["name"]
    doc = await router.store.delete_action(ns, name)
    router.gone(ns, name)
    if doc is None:
        raise ApiError(404, NOT_FOUND)
    return _json(doc)


async def list_actions(request: web.Request) -> web.Response:
    router, _, ns = _context(request)
    limit, skip = _page(request, "actions")
    if _flag(request, "count", False):  # OpenWhisk counts what a list from ``skip`` holds
        return _json({"actions": await router.store.count_actions(ns, skip=skip)})
    docs = await router.store.list_actions(ns, limit=limit, skip=skip)
    for doc in docs:  # listings omit the code, as OpenWhisk's do
        exec_ = doc.get("exec") or {}
        doc["exec"] = {"kind": exec_.get("kind"), "binary": exec_.get("binary", False)}
    return _json(docs)


async def invoke(request: web.Request) -> web.Response:
    router, identity, ns = _context(request)
    action = await router.action(ns, request.match_info["name"])
    raw = await read_limited(request, router.settings.max_payload_bytes)
    params = parse_json(raw)  # within 1 MiB: a few ms at worst, on the event loop
    if not isinstance(params, dict):
        raise ApiError(400, "The request content was malformed: expected a JSON object.")
    blocking = request.query.get("blocking", "false").lower() == "true"
    result_only = request.query.get("result", "false").lower() == "true"
    wait = router.settings.max_blocking_wait
    if "timeout" in request.query:
        try:
            wait = min(wait, max(0.0, int(request.query["timeout"]) / 1000))
        except ValueError:
            raise ApiError(400, "timeout must be an integer (milliseconds).") from None
    started = time.monotonic()
    proxied = router.is_proxied(request)
    given = request.headers.get(ACTIVATION_HEADER, "")
    activation_id = given if proxied and is_activation_id(given) else new_activation_id()
    header = {"x-openwhisk-activation-id": activation_id}
    # should this router die, the next one started under its id records the activation (a
    # whisk internal error). Durable before the id is handed out (202). A blocking caller
    # holds no id until its answer and a death fails its request: its mark is written only
    # if the activation is still running after MARK_DELAY (most end sooner: no store write)
    failure = router.failure_record(action, identity, activation_id)
    if not blocking:
        await router.writer.mark(failure)
    else:
        router.writer.mark(failure, MARK_DELAY)
    task = router.invoker.spawn(
        router.execute(
            action,
            params,
            identity,
            activation_id,
            started,
            proxied=proxied,
            blocking=blocking,
        )
    )
    finished = blocking and bool((await asyncio.wait({task}, timeout=wait))[0])
    if not finished:
        if blocking:
            await router.writer.mark(failure)  # the id is handed out now
        task.add_done_callback(
            lambda t: _detached(router, t, request, raw, identity, activation_id, action)
        )
        return _json({"activationId": activation_id}, 202, **header)
    try:
        record = task.result()
    except ProxyTo as exc:
        router.writer.unmark(activation_id)  # the peer router marks it
        if proxied:  # never a second hop
            raise ApiError(503, "The action's containers moved; try again.") from None
        # the peer gets what is left of this request's wait, so the caller's whole wait
        # (and so the front door's read timeout) still bounds the answer
        left = max(0.0, wait - (time.monotonic() - started))
        return await router.forward(exc.urls, request, raw, identity, activation_id, wait=left)
    except Throttled as exc:
        router.writer.unmark(activation_id)  # refused: no activation
        raise ApiError(exc.status, str(exc), retry_after=exc.retry_after) from None
    status = 200 if record["response"]["success"] else 502
    body = record["response"]["result"] if result_only else record
    return _json(body, status, **header)


def _detached(
    router: Router,
    task: asyncio.Task[Any],
    request: web.Request,
    raw: bytes,
    identity: Any,
    activation_id: str,
    action: ActionInfo,
) -> None:
    """An invoke already answered with 202 ended without a record: forward it to the peer
    router the manager named, or record the throttling, so the activation id resolves."""
    if task.cancelled():
        return  # the in-flight mark stays: the router's next run records it
    exc = task.exception()
    if isinstance(exc, ProxyTo) and not router.is_proxied(request):  # never a second hop
        router.invoker.spawn(
            router.forward_detached(exc.urls, request, raw, identity, action, activation_id)
        )
    elif isinstance(exc, (ProxyTo, Throttled)):
        router.record_throttled(action, identity, activation_id)
    elif exc is not None:
        log.error("activation %s failed in the router", activation_id, exc_info=exc)
        router.writer.submit(router.failure_record(action, identity, activation_id, FAILED))


# ---- activations -------------------------------------------------------------------------
async def _activation(request: web.Request) -> dict[str, Any]:
    router, _, ns = _context(request)
    aid = request.match_info["id"]
    if not is_activation_id(aid):
        raise ApiError(400, "The activation id is not valid.")
    try:
        record = await router.store.get_activation(ns, aid)
    except StoreUnavailable:  # still waiting here to be written, or 503
        record = await router.writer.get_pending(ns, aid)
        if record is None:
            raise
    if record is None:
        record = await router.writer.get_pending(ns, aid)
    if record is None:
        raise ApiError(404, NOT_FOUND)
    return record


async def get_activation(request: web.Request) -> web.Response:
    return _json(await _activation(request))


async def get_result(request: web.Request) -> web.Response:
    return _json((await _activation(request))["response"])


async def get_logs(request: web.Request) -> web.Response:
    return _json({"logs": (await _activation(request)).get("logs", [])})


async def list_activations(request: web.Request) -> web.Response:
    router, _, ns = _context(request)
    limit, skip = _page(request, "activations")
    count = _flag(request, "count", False)
    docs = _flag(request, "docs", False)
    if count and docs:
        raise ApiError(400, "The parameter 'docs' is not permitted with 'count'.")
    bounds: dict[str, int | None] = {}
    for key in ("since", "upto"):
        value = request.query.get(key)
        if value is not None and not (value.isdigit() and int(value) <= MAX_EPOCH_MS):
            raise ApiError(400, f"{key} must be epoch milliseconds.")
        bounds[key] = int(value) if value else None
    await router.writer.flush()  # read your own writes: list what this router has recorded
    name = request.query.get("name")
    if count:
        counted = await router.store.count_activations(ns, skip=skip, name=name, **bounds)
        return _json({"activations": counted})
    records = await router.store.list_activations(
        ns, limit=limit, skip=skip, name=name, docs=docs, **bounds
    )
    return _json(records if docs else [_summary(r) for r in records])


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    """An activation as OpenWhisk lists it without ``docs=true`` (its activations view's
    ``summarize``): no result, no logs, the status code at the top."""
    out = {k: record[k] for k in SUMMARY_FIELDS if k in record}
    out["statusCode"] = (record.get("response") or {}).get("statusCode")
    return out


# ---- namespaces and what is not built ----------------------------------------------------
async def list_namespaces(request: web.Request) -> web.Response:
    """The namespaces the key may use (OpenWhisk: the caller's own); clients use it as a
    connectivity and credentials check."""
    identity = request.app[ROUTER].identify(request)
    return _json([identity.namespace])


def _missing(what: str, *, authenticated: bool = True) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        if authenticated:
            _context(request)  # 401/403 before saying what is missing, as for any resource
        raise not_implemented(what)

    return handler


# ---- platform ----------------------------------------------------------------------------
async def give_back(request: web.Request) -> web.Response:
    router = request.app[ROUTER]
    router.check_peer(request)  # the manager
    data = parse_json(await read_limited(request, MAX_PLATFORM_BYTES))
    if not isinstance(data, dict):
        raise ApiError(400, MALFORMED.format("expected a JSON object"))
    wait = data.get("wait_seconds")
    result = await router.invoker.release_on_request(
        request.match_info["id"],
        only_if_idle=bool(data.get("only_if_idle", False)),
        wait_seconds=float(wait) if wait is not None else None,
    )
    return _json({"result": result}, {"busy": 409, "waiting": 202}.get(result, 200))


async def state(request: web.Request) -> web.Response:
    """Which containers this router holds (tests, debugging; trusted peers only)."""
    router = request.app[ROUTER]
    router.check_peer(request)  # the manager, peer routers, tests
    pool = router.invoker.pool
    return _json(
        {
            "router": router.settings.router_id,
            "containers": [
                {"id": c.id, "key": c.key, "in_flight": c.in_flight, "paused": c.paused}
                for c in pool.by_id.values()
            ],
        }
    )


async def livez(request: web.Request) -> web.Response:
    """The process serves requests (liveness; also ``/healthz``)."""
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    ready, why = request.app[ROUTER].ready()
    return web.Response(status=200 if ready else 503, text=why + "\n")


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[ROUTER].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _draining(app: web.Application) -> None:
    app[ROUTER].draining = True  # shutdown began: unready while in-flight requests finish


def build_app(router: Router, url: str) -> web.Application:
    # handlers read bodies through ``read_limited``; this bounds any other read
    app = web.Application(middlewares=[errors], client_max_size=MAX_PLATFORM_BYTES)
    app[ROUTER] = router
    app[URL] = url
    base = "/api/v1/namespaces/{namespace}"
    app.router.add_put(base + "/actions/{name}", put_action)
    app.router.add_get(base + "/actions/{name}", get_action)
    app.router.add_delete(base + "/actions/{name}", delete_action)
    app.router.add_post(base + "/actions/{name}", invoke)
    app.router.add_get(base + "/actions", list_actions)
    app.router.add_get(base + "/activations", list_activations)
    app.router.add_get(base + "/activations/{id}", get_activation)
    app.router.add_get(base + "/activations/{id}/result", get_result)
    app.router.add_get(base + "/activations/{id}/logs", get_logs)
    app.router.add_get("/api/v1/namespaces", list_namespaces)
    app.router.add_get("/api/v1/namespaces/", list_namespaces)
    packages = _missing("Packages")
    app.router.add_route("*", base + "/actions/{package}/{name}", packages)
    for collection, what in (("packages", packages), ("triggers", None), ("rules", None)):
        handler = what or _missing(collection.capitalize())
        app.router.add_route("*", f"{base}/{collection}", handler)
        app.router.add_route("*", f"{base}/{collection}/{{tail:.*}}", handler)
    app.router.add_route("*", "/api/v1/web/{tail:.*}", _missing("Web actions", authenticated=False))
    app.router.add_post("/_platform/v1/containers/{id}/giveback", give_back)
    app.router.add_get("/_platform/v1/state", state)
    app.router.add_get("/healthz", livez)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.on_shutdown.append(_draining)
    app.cleanup_ctx.append(lifecycle)
    return app
