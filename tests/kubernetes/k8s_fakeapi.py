"""A small in-process Kubernetes API server: just the paths the manager calls.

Real HTTP (Starlette on uvicorn, 127.0.0.1, ephemeral port), so lightkube runs unmodified.
Implements: Pods (create, list, watch with resourceVersion and 410 Gone for compacted
versions, merge-patch, delete with a grace period), the Eviction subresource with the
PodDisruptionBudget arithmetic of the disruption controller (``maxUnavailable``), PDBs,
a Deployment read, and Leases with optimistic concurrency (409 on a stale resourceVersion).
A built-in "kubelet" makes new pods Ready (or not, per test) and finishes deletions.
Every request is recorded with its RBAC ``(apiGroup, resource, verb)`` and its JSON body.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Obj = dict[str, Any]
GROUPS = {"pods": "", "poddisruptionbudgets": "policy", "deployments": "apps", "leases": ""}
GROUPS["leases"] = "coordination.k8s.io"


def status(code: int, reason: str, message: str) -> JSONResponse:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return JSONResponse(body, status_code=code)


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def matches(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    rbac: tuple[str, str, str]  # (apiGroup, resource, verb)
    status: int = 0


@dataclass
class FakeCluster:
    auto_ready: bool = True  # the kubelet makes new pods Running + Ready
    finish_deletes: bool = True  # the kubelet removes terminating pods at once
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (res, ns, name)
    events: list[tuple[int, str, str, Obj]] = field(default_factory=list)  # rv, ns, type, pod
    calls: list[Call] = field(default_factory=list)
    rv: int = 100
    compacted: int = 0  # watches from a version <= this get 410 Gone
    next_ip: int = 10
    kubelet: Any = None  # runs pods as local processes (k8s_kubelet.ProcessKubelet), or None

    def __post_init__(self) -> None:
        self.changed = asyncio.Condition()
        self.watch_epoch = 0
        self.closing = False
        self.tasks: set[asyncio.Task[None]] = set()

    # ---- helpers for tests ---------------------------------------------------------------
    def pod(self, name: str, namespace: str = "apf") -> Obj | None:
        return self.objects.get(("pods", namespace, name))

    def rbac_used(self) -> set[tuple[str, str, str]]:
        return {c.rbac for c in self.calls}

    def bodies(self, method: str = "POST") -> list[Obj]:
        return [c.body for c in self.calls if c.method == method and isinstance(c.body, dict)]

    async def compact(self) -> None:
        """Forget history and end open watches, so resuming them gets 410 Gone."""
        self.compacted = int(self._bump())
        await self.end_watches()

    async def end_watches(self) -> None:
        async with self.changed:
            self.watch_epoch += 1
            self.changed.notify_all()

    async def set_status(self, name: str, namespace: str, pod_status: Obj) -> None:
        pod = self.objects[("pods", namespace, name)]
        pod["status"] = pod_status
        await self._event(namespace, "MODIFIED", pod)

    async def make_ready(self, name: str, namespace: str = "apf") -> None:
        self.next_ip += 1
        await self.set_status(name, namespace, ready_status(f"10.0.0.{self.next_ip}"))

    async def delete_now(self, name: str, namespace: str = "apf") -> None:
        pod = self.objects.pop(("pods", namespace, name))
        await self._event(namespace, "DELETED", pod)

    async def add_deployment(self, name: str, namespace: str = "apf") -> Obj:
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {}},
        }
        return self._store("deployments", namespace, obj)

    # ---- state ---------------------------------------------------------------------------
    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _store(self, res: str, ns: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = ns
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_stamp())
        meta["resourceVersion"] = self._bump()
        self.objects[(res, ns, meta["name"])] = obj
        return obj

    async def _event(self, ns: str, kind: str, pod: Obj) -> None:
        if kind != "DELETED":
            pod["metadata"]["resourceVersion"] = self._bump()
        else:
            self._bump()
        async with self.changed:
            self.events.append((self.rv, ns, kind, copy.deepcopy(pod)))
            self.changed.notify_all()

    async def _kubelet_start(self, ns: str, name: str) -> None:
        await asyncio.sleep(0)
        if self.kubelet is not None:
            await self.kubelet.start(self, ns, name)
        elif self.auto_ready and ("pods", ns, name) in self.objects:
            await self.make_ready(name, ns)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _kill_then_delete(self, ns: str, name: str, grace: int) -> None:
        await self.kubelet.stop(name, grace)
        if ("pods", ns, name) in self.objects:
            await self.delete_now(name, ns)

    async def _terminate(self, ns: str, name: str, grace: int) -> None:
        pod = self.objects[("pods", ns, name)]
        if not pod["metadata"].get("deletionTimestamp"):
            pod["metadata"]["deletionTimestamp"] = now_stamp()
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
            await self._event(ns, "MODIFIED", pod)
        if self.kubelet is not None:
            self._background(self._kill_then_delete(ns, name, grace))
            return
        if self.finish_deletes or grace == 0:
            await asyncio.sleep(0)
            if ("pods", ns, name) in self.objects:
                await self.delete_now(name, ns)

    # ---- PDB arithmetic (disruption controller + eviction REST) --------------------------
    def eviction_allowed(self, ns: str, pod: Obj) -> tuple[bool, str]:
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Pending", "Succeeded", "Failed", None) or pod["metadata"].get(
            "deletionTimestamp"
        ):
            return True, ""
        labels = pod["metadata"].get("labels") or {}
        for (res, pns, _), pdb in self.objects.items():
            if res != "poddisruptionbudgets" or pns != ns:
                continue
            sel = pdb["spec"]["selector"].get("matchLabels") or {}
            if any(labels.get(k) != v for k, v in sel.items()):
                continue
            members = [
                o
                for (r, n, _), o in self.objects.items()
                if r == "pods"
                and n == ns
                and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items())
            ]
            expected = len(members)
            healthy = sum(1 for o in members if is_ready(o))
            desired = expected - int(pdb["spec"].get("maxUnavailable", 0))
            if "minAvailable" in pdb["spec"]:
                desired = int(pdb["spec"]["minAvailable"])
            allowed = healthy - desired
            if is_ready(pod) and allowed <= 0:
                return False, pdb["metadata"]["name"]
            if not is_ready(pod) and healthy < desired:
                return False, pdb["metadata"]["name"]
        return True, ""


def ready_status(ip: str) -> Obj:
    return {
        "phase": "Running",
        "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {
                "name": "runtime",
                "ready": True,
                "restartCount": 0,
                "image": "x",
                "imageID": "x",
                "state": {"running": {"startedAt": now_stamp()}},
            }
        ],
    }


def is_ready(pod: Obj) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []
    )


# ---- HTTP ----------------------------------------------------------------------------------
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
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        async with cluster.changed:
            cluster.closing = True
            cluster.changed.notify_all()
        server.should_exit = True
        await task
