"""The fake API server's HTTP surface (Starlette on uvicorn, 127.0.0.1, ephemeral port) over
``k8s_fakeapi.FakeCluster``: routes, RBAC verb of each request, watch streams, ``serve``."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from k8s_fakeapi import Call, FakeCluster, matches, merge_patch, status
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.serving import started_port


def _parse(path: str) -> tuple[str, str, str, str | None, str | None] | None:
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if len(rest) < 3 or rest[0] != "namespaces":
        return None
    ns, res = rest[1], rest[2]
    name = rest[3] if len(rest) > 3 else None
    sub = rest[4] if len(rest) > 4 else None
    return group, ns, res, name, sub


def _verb(method: str, name: str | None, watch: bool) -> str:
    if method == "GET":
        return "watch" if watch else ("get" if name else "list")
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]


def build_app(cluster: FakeCluster) -> Starlette:
    async def handle(request: Request) -> Response:
        parsed = _parse(request.url.path)
        if parsed is None:
            return status(404, "NotFound", f"no route {request.url.path}")
        group, ns, res, name, sub = parsed
        query = dict(request.query_params)
        watch = query.get("watch") in ("true", "1")
        raw = await request.body()
        body = json.loads(raw) if raw else None
        resource = f"{res}/{sub}" if sub else res
        call = Call(
            request.method,
            request.url.path,
            query,
            body,
            (group, resource, _verb(request.method, name if not sub else None, watch)),
        )
        cluster.calls.append(call)
        response = await _dispatch(cluster, request.method, ns, res, name, sub, query, body)
        call.status = response.status_code
        return response

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", handle, methods=methods)])


async def _dispatch(
    cluster: FakeCluster,
    method: str,
    ns: str,
    res: str,
    name: str | None,
    sub: str | None,
    query: dict[str, str],
    body: Any,
) -> Response:
    key = (res, ns, name or "")
    if sub == "eviction" and method == "POST":
        pod = cluster.objects.get(("pods", ns, name or ""))
        if pod is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        ok, _pdb = cluster.eviction_allowed(ns, pod)
        if not ok:
            return status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
        grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        await cluster._terminate(ns, name or "", grace)
        return JSONResponse({"kind": "Status", "apiVersion": "v1", "status": "Success"}, 201)
    if method == "GET" and name is None:
        if query.get("watch") in ("true", "1"):
            return _watch(cluster, ns, res, query)
        items = [
            o
            for (r, n, _), o in sorted(cluster.objects.items())
            if r == res
            and n == ns
            and matches(o["metadata"].get("labels") or {}, query.get("labelSelector"))
        ]
        return JSONResponse(
            {
                "kind": "List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(cluster.rv)},
                "items": items,
            }
        )
    if method == "GET":
        obj = cluster.objects.get(key)
        if obj is None:
            return status(404, "NotFound", f'{res} "{name}" not found')
        return JSONResponse(obj)
    if method == "POST":
        obj_name = body["metadata"]["name"]
        if (res, ns, obj_name) in cluster.objects:
            return status(409, "AlreadyExists", f'{res} "{obj_name}" already exists')
        obj = cluster._store(res, ns, copy.deepcopy(body))
        if res == "pods":
            obj["status"] = {"phase": "Pending"}
            await cluster._event(ns, "ADDED", obj)
            cluster._background(cluster._kubelet_start(ns, obj_name))
        return JSONResponse(obj, 201)
    if method == "PUT":
        current = cluster.objects.get(key)
        if current is None:
            return status(404, "NotFound", f'{res} "{name}" not found')
        given = (body.get("metadata") or {}).get("resourceVersion")
        if given != current["metadata"]["resourceVersion"]:
            return status(
                409,
                "Conflict",
                "the object has been modified; please apply your "
                "changes to the latest version and try again",
            )
        new = copy.deepcopy(body)
        new["metadata"]["uid"] = current["metadata"]["uid"]
        new["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        return JSONResponse(cluster._store(res, ns, new))
    if method == "PATCH":
        current = cluster.objects.get(key)
        if current is None:
            return status(404, "NotFound", f'{res} "{name}" not found')
        patched = merge_patch(current, body)
        cluster.objects[key] = patched
        if res == "pods":
            await cluster._event(ns, "MODIFIED", patched)
        return JSONResponse(patched)
    if method == "DELETE":
        if key not in cluster.objects:
            return status(404, "NotFound", f'{res} "{name}" not found')
        if res == "pods":
            grace = int(query.get("gracePeriodSeconds", "30"))
            await cluster._terminate(ns, name or "", grace)
        else:
            del cluster.objects[key]
        return JSONResponse({"kind": "Status", "apiVersion": "v1", "status": "Success"})
    return status(405, "MethodNotAllowed", method)


def _watch(cluster: FakeCluster, ns: str, res: str, query: dict[str, str]) -> Response:
    since = int(query.get("resourceVersion") or cluster.rv)
    selector = query.get("labelSelector")

    async def stream() -> AsyncIterator[bytes]:
        if since < cluster.compacted:
            gone = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {since} ({cluster.compacted})",
                "reason": "Expired",
                "code": 410,
            }
            yield (json.dumps({"type": "ERROR", "object": gone}) + "\n").encode()
            return
        epoch, seen = cluster.watch_epoch, since
        while True:
            async with cluster.changed:
                await cluster.changed.wait_for(
                    lambda: (
                        cluster.closing
                        or cluster.watch_epoch != epoch
                        or (bool(cluster.events) and cluster.events[-1][0] > seen)  # noqa: B023
                    )
                )
                if cluster.closing or cluster.watch_epoch != epoch:
                    return
                fresh = [e for e in cluster.events if e[0] > seen]
            for rv, ens, kind, pod in fresh:
                seen = rv
                if (
                    res == "pods"
                    and ens == ns
                    and matches(pod["metadata"].get("labels") or {}, selector)
                ):
                    yield (json.dumps({"type": kind, "object": pod}) + "\n").encode()

    return StreamingResponse(stream(), media_type="application/json")


@contextlib.asynccontextmanager
async def serve(cluster: FakeCluster) -> AsyncIterator[str]:
    """Run the fake API server; yields its base URL."""
    config = uvicorn.Config(
        build_app(cluster),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    port = await started_port(server, task)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        async with cluster.changed:
            cluster.closing = True
            cluster.changed.notify_all()
        server.should_exit = True
        await task
