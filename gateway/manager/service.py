"""The manager's I/O shell: backend calls, router calls and stem cells around ``ManagerCore``.

Container labels written to the backend: ``role`` (``action`` or ``stem``), ``kind``,
``memory`` and, for action containers, ``action`` (the ``ActionSpec`` as JSON); they are all
a restarted manager needs to rebuild its view from ``backend.list()``.

Removal paths: a container that holds no work (given back idle, failed, reclaimed, a ``Never``
container drained once idle, an idle one evicted for space) is ``remove``d. A graceful stop of
one that may be busy (``OnUpgrade``/``Always`` drains and evictions) is a voluntary disruption:
it goes through the backend's ``evict`` when it has one, so the platform's disruption budgets
apply; a refused eviction keeps the container (warm and unowned again) and is retried every
``eviction_retry_seconds``, never forced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.flowcontrol.clock import AsyncioEventClock, EventClock
from gateway.manager.backends.base import (
    Backend,
    BackendError,
    ContainerHandle,
    ContainerSpec,
    Status,
    can_evict,
)
from gateway.manager.core import ActionSpec, Container, CState, Grant, ManagerCore, ManagerSettings
from gateway.manager.policy import Disruption, Reason
from gateway.platform.ids import new_container_id

log = logging.getLogger("gateway.manager")

STEM_MEMORY_MB = 256


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    core: ManagerSettings = field(default_factory=ManagerSettings)
    grace_seconds: float = 5.0  # SIGTERM -> SIGKILL for graceful stops
    prewarm: dict[str, int] = field(default_factory=dict)  # kind -> stem cells kept ready
    remove_on_exit: bool = True
    max_evictions_per_acquire: int = 8
    # a stem cell taken is replaced after this delay, so that starting the replacement (a
    # process start, CPU-heavy) does not compete with the /init and /run it was taken for
    backfill_delay_seconds: float = 0.25
    eviction_retry_seconds: float = 5.0  # a refused eviction is tried again after this


class AcquireRejected(Exception):
    def __init__(self, message: str, status: int = 429) -> None:
        super().__init__(message)
        self.status = status


class ManagerService:
    def __init__(
        self, backend: Backend, settings: ServiceSettings, clock: EventClock | None = None
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.core = ManagerCore(clock or AsyncioEventClock(), settings.core, self._on_reclaim)
        self.handles: dict[str, ContainerHandle] = {}
        self.stems: dict[str, list[ContainerHandle]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._http: aiohttp.ClientSession | None = None
        self._backfilling: set[str] = set()
        self._retrying: set[str] = set()  # containers whose refused eviction will be retried
        self.started = False
        self.stopping = False

    # ---- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        for handle in await self.backend.list():
            self.handles[handle.id] = handle
            if handle.labels.get("role") == "stem":
                self.stems.setdefault(handle.labels.get("kind", ""), []).append(handle)
                continue
            try:
                spec = ActionSpec.from_json(json.loads(handle.labels["action"]))
            except (KeyError, ValueError) as exc:
                log.warning("container %s has unreadable labels (%s); removing it", handle.id, exc)
                self._spawn(self._remove(handle.id, 0.0))
                continue
            self.core.adopt(handle.id, spec, handle.url, self.backend.agent(handle))
        log.info("recovered %d containers", len(self.handles))
        for kind in self.settings.prewarm:
            self._spawn(self._backfill(kind))
        self.started = True

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: once the backend's containers are recovered, until shutdown begins."""
        if self.stopping:
            return False, "stopping"
        if not self.started:
            return False, "recovering the backend's containers"
        return True, "ok"

    async def stop(self) -> None:
        self.stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.settings.remove_on_exit:
            await asyncio.gather(
                *(
                    self.backend.remove(h, self.settings.grace_seconds)
                    for h in self.handles.values()
                ),
                return_exceptions=True,
            )
        await self.backend.close()
        if self._http is not None:
            await self._http.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- acquire -------------------------------------------------------------------------
    async def acquire(
        self,
        router_id: str,
        action: ActionSpec,
        *,
        count: int,
        known: list[str],
        allow_proxy: bool,
    ) -> Grant:
        for _ in range(self.settings.max_evictions_per_acquire + 1):
            grant = self.core.acquire(
                router_id, action, count=count, known=known, allow_proxy=allow_proxy
            )
            if grant.reject is not None:
                raise AcquireRejected(grant.reject)
            if grant.create:
                created = await asyncio.gather(*(self._create(c) for c in grant.create))
                made = [c for c in created if c is not None]
                if not made:
                    raise AcquireRejected("The container backend could not start a container.", 503)
                return Grant(assigned=made)
            if grant.evict:
                if not await self._evict_one(grant.evict):
                    raise AcquireRejected(
                        f"The namespace '{action.namespace}' has reached its container quota "
                        "and all of its evictable containers are busy."
                    )
                continue
            return grant
        raise AcquireRejected("Too many evictions needed to make space; try again later.")

    async def _create(self, c: Container) -> Container | None:
        labels = {
            "role": "action",
            "kind": c.action.kind,
            "memory": str(c.action.memory_mb),
            "action": json.dumps(c.action.to_json()),
        }
        a = c.action
        try:
            handle = await self._take_stem(c, labels)
            if handle is None:
                spec = ContainerSpec(
                    c.id,
                    a.kind,
                    a.memory_mb,
                    a.concurrency,
                    labels,
                    image=a.image,
                    grace_seconds=a.grace_seconds,
                    eviction=a.eviction,
                    pod_template=a.pod_template,
                    router=c.owner,
                )
                handle = await self.backend.create(spec)
        except BackendError as exc:
            log.warning("cannot create container for %s: %s", c.action.key, exc)
            self.core.removed(c.id)
            return None
        self.handles[c.id] = handle
        done = self.core.created(c.id, handle.url, self.backend.agent(handle))
        if done is None:  # removed meanwhile
            self._spawn(self._remove(c.id, 0.0))
        return done

    async def _take_stem(self, c: Container, labels: dict[str, str]) -> ContainerHandle | None:
        stems = self.stems.get(c.action.kind)
        a = c.action
        if not stems or a.memory_mb != STEM_MEMORY_MB or a.image or a.pod_template:
            return None  # a stem cell runs our image with the default pod
        stem = stems.pop(0)
        self._spawn(self._backfill(c.action.kind, self.settings.backfill_delay_seconds))
        if await self.backend.status(stem) is not Status.RUNNING:  # died while waiting
            self.handles.pop(stem.id, None)
            self._spawn(self.backend.remove(stem, 0.0))
            return None
        handle = await self.backend.relabel(stem, {**stem.labels, **labels})
        # the stem's id becomes the container id: the core's reservation takes its identity
        self.core.containers[stem.id] = self.core.containers.pop(c.id)
        c.id = stem.id
        return handle

    async def _backfill(self, kind: str, delay: float = 0.0) -> None:
        if kind in self._backfilling:
            return
        self._backfilling.add(kind)
        try:
            await asyncio.sleep(delay)
            while len(self.stems.get(kind, [])) < self.settings.prewarm.get(kind, 0):
                spec = ContainerSpec(
                    new_container_id(), kind, STEM_MEMORY_MB, None, {"role": "stem", "kind": kind}
                )
                handle = await self.backend.create(spec)
                self.handles[handle.id] = handle
                self.stems.setdefault(kind, []).append(handle)
        except BackendError as exc:
            log.warning("cannot prewarm a %s container: %s", kind, exc)
        finally:
            self._backfilling.discard(kind)

    async def _evict_one(self, candidates: list[Container]) -> bool:
        """Space eviction: the first candidate its owner gives back idle is removed."""
        for c in candidates:
            if c.state is CState.ASSIGNED and c.owner is not None:
                url = self.core.routers[c.owner].url if c.owner in self.core.routers else None
                if url is not None and not await self._ask_give_back(url, c.id, True, 0.0):
                    continue
            if self.core.begin_removal(c.id) is None:
                continue
            log.info("evicting idle %s (%s) to make space", c.id, c.action.key)
            self._spawn(self._remove(c.id, self._grace(c)))
            return True
        return False

    # ---- give back, evict, drain ---------------------------------------------------------
    def give_back(self, router_id: str, cid: str, reason: str) -> bool:
        c = self.core.containers.get(cid)
        if c is None or c.owner != router_id:
            return False
        self.core.begin_removal(cid)
        grace = 0.0 if reason in ("timeout", "failed", "init-failed") else self._grace(c)
        self._spawn(self._remove(cid, grace))
        return True

    def _grace(self, c: Container) -> float:
        """The action's grace period, else the manager's."""
        if c.action.grace_seconds is not None:
            return float(c.action.grace_seconds)
        return self.settings.grace_seconds

    async def disrupt(self, cid: str, reason: Reason) -> tuple[Disruption, str | None]:
        """The policy's decision, and why the container was kept despite it (or None)."""
        decision = self.core.disruption(cid, reason)
        kept = None
        if decision is not Disruption.REFUSE:
            kept = await self._disrupt(self.core.containers[cid], decision, reason)
        return decision, kept

    async def drain(
        self, namespace: str | None, action: str | None
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Upgrade-style drain: (decision per container, why some were kept)."""
        chosen = self.core.select(namespace, action)
        decisions = {c.id: self.core.disruption(c.id, Reason.UPGRADE) for c in chosen}
        kept = await asyncio.gather(
            *(self._disrupt(c, decisions[c.id], Reason.UPGRADE) for c in chosen)
        )
        return (
            {cid: d.value for cid, d in decisions.items()},
            {c.id: why for c, why in zip(chosen, kept, strict=True) if why is not None},
        )

    async def _disrupt(self, c: Container, decision: Disruption, reason: Reason) -> str | None:
        """Remove ``c`` as ``decision`` says; the reason it was kept instead, if it was."""
        grace = self._grace(c)
        when_idle = decision is Disruption.WHEN_IDLE
        if when_idle and c.state is CState.QUARANTINED:
            # its last owner may still be running an activation in it: never while busy
            return "quarantined: its last owner may still be using it; drain again later"
        if c.state is CState.ASSIGNED and c.owner in self.core.routers:
            url = self.core.routers[c.owner].url
            answered = await self._ask_give_back(url, c.id, False, None if when_idle else grace)
            if when_idle and not answered:
                return "its owner did not confirm it is idle; drain again later"
        if self.core.begin_removal(c.id) is None:
            return None
        if when_idle or not can_evict(self.backend):
            await self._remove(c.id, grace)  # idle: removing it disrupts nothing
            return None
        return await self._evict(c, grace, reason)

    async def _evict(self, c: Container, grace: float, reason: Reason) -> str | None:
        """A graceful stop through the backend's eviction; kept (and retried) if refused."""
        assert can_evict(self.backend)
        handle = self.handles.get(c.id)
        if handle is None:
            self.core.removed(c.id)
            return None
        try:
            gone = await self.backend.evict(handle, grace=grace)
            why = "the platform refused the eviction (a disruption budget)"
        except BackendError as exc:
            gone, why = False, f"the eviction failed: {exc}"
        if gone:
            self.handles.pop(c.id, None)
            self.core.removed(c.id)
            return None
        self.core.restore(c.id)
        self._retry_eviction(c.id, reason)
        log.info("%s kept: %s", c.id, why)
        return f"{why}; kept, retried in {self.settings.eviction_retry_seconds:g} s"

    def _retry_eviction(self, cid: str, reason: Reason) -> None:
        if cid in self._retrying:
            return
        self._retrying.add(cid)

        def retry() -> None:
            self._retrying.discard(cid)
            c = self.core.containers.get(cid)
            if c is not None and c.state is not CState.REMOVING:
                self._spawn(self.disrupt(cid, reason))

        self.core.clock.call_later(self.settings.eviction_retry_seconds, retry)

    async def _ask_give_back(
        self, router_url: str, cid: str, only_if_idle: bool, wait: float | None
    ) -> bool:
        assert self._http is not None
        body = {"only_if_idle": only_if_idle, "wait_seconds": wait}
        try:
            async with self._http.post(
                f"{router_url}/_platform/v1/containers/{cid}/giveback", json=body
            ) as resp:
                return resp.status == 200
        except aiohttp.ClientError as exc:
            log.warning("router %s unreachable for give-back of %s: %s", router_url, cid, exc)
            return False

    async def _remove(self, cid: str, grace: float) -> None:
        handle = self.handles.pop(cid, None)
        try:
            if handle is not None:
                await self.backend.remove(handle, grace)
        finally:
            self.core.removed(cid)

    def _on_reclaim(self, c: Container) -> None:
        self._spawn(self._remove(c.id, self._grace(c)))

    async def wait_idle(self) -> None:
        """Wait for background removals (tests and shutdown)."""
        while self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
