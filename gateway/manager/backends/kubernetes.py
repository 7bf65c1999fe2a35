"""Containers as Pods (``--backend kubernetes``); see docs/deploy.md.

- ``create`` POSTs a Pod rendered by ``k8s.podspec`` and returns once the pod watch reports it
  Ready with an IP (``http://<podIP>:<port>``); a pod that fails (image pull, crash, Failed
  phase) or is not ready within ``start_timeout`` is deleted and ``BackendError`` raised.
- ``remove`` DELETEs with ``gracePeriodSeconds`` (at least 1: the kubelet still confirms the
  kill) and waits for the pod to disappear from the watch. ``evict`` POSTs an Eviction (same
  grace in its ``deleteOptions``) so PodDisruptionBudgets apply: a 429 returns False and
  leaves the pod alone (the manager retries later), it is never turned into a DELETE.
- Pause/resume have no Kubernetes equivalent: they are no-ops (the pod stays warm and keeps its
  CPU request) and ``agent()`` is empty, so routers never try to pause (nor read log files).
- ``list`` after a manager restart returns the ready pods carrying this manager's labels and
  deletes the others that no ``create`` of this process waits for (creates interrupted by the
  restart, failed pods): nobody would ever use them.
- At first use: the owner Deployment's uid is resolved (ownerReferences), the namespace's
  PodDisruptionBudget for ``Never`` pods is created if missing, and the watch starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import time
from datetime import datetime
from typing import Any

from gateway.manager.backends.base import (
    BackendError,
    ContainerGone,
    ContainerHandle,
    ContainerSpec,
    Status,
    new_secret,
)
from gateway.manager.backends.k8s.api import KubeApi, KubeError
from gateway.manager.backends.k8s.eviction import PDB_NAME, pdb_body
from gateway.manager.backends.k8s.options import K8sOptions
from gateway.manager.backends.k8s.podspec import (
    LABELS_ANNOTATION,
    Owner,
    derived_labels,
    relabel_eviction,
    render_pod,
    runtime_port,
    runtime_secret,
    selector,
)
from gateway.manager.backends.k8s.watch import Pod, PodWatch, failure, is_ready, is_terminating

log = logging.getLogger("gateway.manager.kubernetes")


class KubernetesBackend:
    name = "kubernetes"

    def __init__(self, *, api: KubeApi | None = None, **options: Any) -> None:
        self.options = K8sOptions.from_os(**options)
        self.api = api or KubeApi(self.options.namespace, self.options.server)
        self.labels = selector(self.options)
        self.watch = PodWatch(self.api, self.labels)
        self.owner: Owner | None = None
        self.warnings: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._creating: set[str] = set()

    # ---- start-up ------------------------------------------------------------------------
    async def start(self) -> None:
        async with self._start_lock:
            if self._task is not None:
                return
            self.owner = await self._resolve_owner()
            await self.ensure_pdb()
            self._task = asyncio.ensure_future(self.watch.run())
        await self.watch.synced.wait()

    async def _resolve_owner(self) -> Owner | None:
        name, uid = self.options.owner_deployment, self.options.owner_uid
        if not name:
            log.warning("no owner Deployment configured: pods outlive a deleted manager")
            return None
        if not uid:
            try:
                deployment = await self.api.get_deployment(name)
            except KubeError as exc:
                raise BackendError(f"cannot read the owner Deployment {name!r}: {exc}") from exc
            if deployment is None:
                raise BackendError(f"the owner Deployment {name!r} does not exist")
            uid = str(deployment["metadata"]["uid"])
        return Owner(name, uid)

    async def ensure_pdb(self) -> None:
        """Create the namespace's PDB for ``Never`` pods unless it exists (once per start)."""
        try:
            if await self.api.get_pdb(PDB_NAME) is None:
                await self.api.create_pdb(pdb_body(self.options.namespace, self.labels))
                log.info("created PodDisruptionBudget %s", PDB_NAME)
        except KubeError as exc:
            if exc.status != 409:  # created by someone else meanwhile
                raise BackendError(f"cannot ensure the PodDisruptionBudget: {exc}") from exc

    # ---- lifecycle -----------------------------------------------------------------------
    async def create(self, spec: ContainerSpec) -> ContainerHandle:
        await self.start()
        if not spec.secret:  # never an open runtime, whoever forgot it
            spec = dataclasses.replace(spec, secret=new_secret())
        body, warnings = render_pod(spec, self.options, self.owner)
        for warning in warnings:
            log.warning("pod %s: %s", spec.id, warning)
        self.warnings.extend(warnings)
        self._creating.add(spec.id)
        try:
            return await self._create(spec, body)
        finally:
            self._creating.discard(spec.id)

    async def _create(self, spec: ContainerSpec, body: dict[str, Any]) -> ContainerHandle:
        try:
            await self.api.create_pod(body)
        except KubeError as exc:
            raise BackendError(f"cannot create pod {spec.id}: {exc}") from exc
        deadline = time.monotonic() + self.options.start_timeout
        try:
            # first until the watch has seen it (absent before that means "not seen yet")
            await self.watch.wait_for(spec.id, lambda p: p is not None, self.options.start_timeout)
            pod = await self.watch.wait_for(
                spec.id,
                lambda p: p is None or is_ready(p) or failure(p) is not None or is_terminating(p),
                max(0.0, deadline - time.monotonic()),
            )
        except TimeoutError:
            await self._discard(spec.id)
            raise BackendError(
                f"pod {spec.id} was not ready within {self.options.start_timeout} s"
            ) from None
        if pod is None or not is_ready(pod):
            why = "it was deleted" if pod is None else (failure(pod) or "it is terminating")
            await self._discard(spec.id)
            raise BackendError(f"pod {spec.id} did not start: {why}")
        return self._handle(pod)

    async def _discard(self, name: str) -> None:
        with contextlib.suppress(KubeError):
            await self.api.delete_pod(name, 0)

    async def remove(self, handle: ContainerHandle, grace: float) -> None:
        await self.start()
        seconds = max(1, math.ceil(grace))
        try:
            if not await self.api.delete_pod(handle.id, seconds):
                return
        except KubeError as exc:
            raise BackendError(f"cannot delete pod {handle.id}: {exc}") from exc
        await self._wait_gone(handle.id, seconds + 30.0)

    async def evict(self, handle: ContainerHandle, *, grace: float) -> bool:
        """One Eviction: True once the pod is gone, False if a PodDisruptionBudget refused."""
        await self.start()
        seconds = max(1, math.ceil(grace))
        try:
            accepted = await self.api.evict_pod(handle.id, seconds)
        except KubeError as exc:
            raise BackendError(f"cannot evict pod {handle.id}: {exc}") from exc
        if not accepted:
            log.info("eviction of %s refused by a PodDisruptionBudget", handle.id)
            return False
        await self._wait_gone(handle.id, seconds + 30.0)
        return True

    async def _wait_gone(self, name: str, seconds: float) -> None:
        try:
            await self.watch.wait_for(name, lambda p: p is None, seconds)
        except TimeoutError:
            log.warning("pod %s still exists %.0f s after its deletion", name, seconds)

    async def pause(self, handle: ContainerHandle) -> None:
        """No Kubernetes equivalent: the pod stays warm (see the module docstring)."""
        await self._require(handle)

    async def resume(self, handle: ContainerHandle) -> None:
        await self._require(handle)

    async def _require(self, handle: ContainerHandle) -> None:
        if await self.status(handle) is Status.GONE:
            raise ContainerGone(handle.id)

    async def status(self, handle: ContainerHandle) -> Status:
        await self.start()
        pod = self.watch.pods.get(handle.id)
        if pod is None or is_terminating(pod) or failure(pod) is not None:
            return Status.GONE
        return Status.RUNNING

    async def list(self) -> list[ContainerHandle]:
        await self.start()
        found = []
        for name, pod in sorted(self.watch.pods.items()):
            if is_terminating(pod) or name in self._creating:
                continue
            if is_ready(pod) and failure(pod) is None:
                found.append(self._handle(pod))
            else:
                log.info("deleting stale pod %s (%s)", name, failure(pod) or "not ready")
                await self._discard(name)
        return found

    async def relabel(self, handle: ContainerHandle, labels: dict[str, str]) -> ContainerHandle:
        """New manager labels; a stem cell bound to an action also takes its eviction policy."""
        await self.start()
        evict_labels, evict_annotations = relabel_eviction(labels, self.options)
        patch = {
            "metadata": {
                "labels": {**evict_labels, **derived_labels(labels)},
                "annotations": {**evict_annotations, LABELS_ANNOTATION: json.dumps(labels)},
            }
        }
        try:
            pod = await self.api.patch_pod(handle.id, patch)
        except KubeError as exc:
            if exc.status == 404:
                raise ContainerGone(handle.id) from exc
            raise BackendError(f"cannot relabel pod {handle.id}: {exc}") from exc
        return self._handle(pod)

    def agent(self, handle: ContainerHandle) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.api.close()

    # ---- helpers -------------------------------------------------------------------------
    def _handle(self, pod: Pod) -> ContainerHandle:
        meta, status = pod["metadata"], pod.get("status") or {}
        try:
            labels = json.loads((meta.get("annotations") or {}).get(LABELS_ANNOTATION, "{}"))
        except ValueError:
            labels = {}
        ip = status.get("podIP", "")
        host = f"[{ip}]" if ":" in ip else ip
        return ContainerHandle(
            id=meta["name"],
            url=f"http://{host}:{runtime_port(pod, self.options.runtime_port)}",
            labels=labels,
            created=_created(pod),
            data={"pod": meta["name"], "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            secret=runtime_secret(pod),
        )


def _created(pod: Pod) -> float:
    stamp = pod.get("metadata", {}).get("creationTimestamp")
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    if isinstance(stamp, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return time.time()
