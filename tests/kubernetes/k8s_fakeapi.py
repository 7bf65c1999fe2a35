"""A small in-process Kubernetes API server: just the paths the manager calls.

State and semantics here; the HTTP surface is in ``k8s_fakehttp`` (real HTTP on 127.0.0.1,
so lightkube runs unmodified).
Implements: Pods (create, list, watch with resourceVersion and 410 Gone for compacted
versions, merge-patch, delete with a grace period), the Eviction subresource with the
PodDisruptionBudget arithmetic of the disruption controller (``maxUnavailable``), PDBs,
a Deployment read, and Leases with optimistic concurrency (409 on a stale resourceVersion).
A built-in "kubelet" makes new pods Ready (or not, per test) and finishes deletions.
Every request is recorded with its RBAC ``(apiGroup, resource, verb)`` and its JSON body.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.responses import JSONResponse

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
