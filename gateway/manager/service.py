"""The manager's I/O shell: backend calls, router calls and stem cells around ``ManagerCore``.

Container labels written to the backend: ``role`` (``action`` or ``stem``), ``kind``,
``memory`` and, for action containers, ``action`` (the ``ActionSpec`` as JSON); they are all
a restarted manager needs to rebuild its view from ``backend.list()``.

Give-backs, evictions and drains (which use the backend's optional ``evict``) live in
``gateway.manager.disruption``; metrics in ``gateway.manager.metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.clock import AsyncioEventClock, EventClock
from gateway.manager.backends.base import (
    Backend,
    BackendError,
    ContainerHandle,
    ContainerSpec,
    Status,
    new_secret,
)
from gateway.manager.core import (
    ActionSpec,
    Container,
    Grant,
    ManagerCore,
    ManagerSettings,
    RouterLease,
)
from gateway.manager.disruption import Disruptions
from gateway.manager.metrics import ManagerMetrics
from gateway.platform.ids import new_container_id
from gateway.platform.internal_token import bearer
from gateway.store import Store, StoreError, open_store

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
    internal_token: str = field(default="", repr=False)  # required on /v1/*; sent to routers
    # on SIGTERM, wait this long for routers to finish and deregister before removing the
    # containers they may still be running activations in (0: do not wait)
    router_wait_seconds: float = 0.0
    # the routers' store: the activations a lost router left in flight are recorded there
    store_url: str | None = None


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
        self.core = ManagerCore(
            clock or AsyncioEventClock(), settings.core, self._on_reclaim, self._on_router_lost
        )
        self.handles: dict[str, ContainerHandle] = {}
        self.stems: dict[str, list[ContainerHandle]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._http: aiohttp.ClientSession | None = None
        self._backfilling: set[str] = set()
        self.metrics = ManagerMetrics(lambda: self, settings.prewarm)
        self.disruptions = Disruptions(self)
        self.started = False
        self.stopping = False
        self.store: Store | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self.settings.store_url:
            store = open_store(self.settings.store_url)
            await store.open()
            self.store = store
        token = self.settings.internal_token
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), headers=bearer(token) if token else None
        )
        for handle in await self.backend.list():
            self.handles[handle.id] = handle
            if handle.labels.get("role") == "stem":
                self.stems.setdefault(handle.labels.get("kind", ""), []).append(handle)
                continue
            try:
                spec = ActionSpec.from_json(json.loads(handle.labels["action"]))
            except (KeyError, ValueError) as exc:
                log.warning("container %s has unreadable labels (%s); removing it", handle.id, exc)
                self.spawn(self.remove(handle.id, 0.0, "unreadable"))
                continue
            self.core.adopt(handle.id, spec, handle.url, self.backend.agent(handle), handle.secret)
        log.info(
            "recovered %d containers from the %s backend; stem cells: %s",
            len(self.handles),
            type(self.backend).__name__,
            ", ".join(f"{k}={n}" for k, n in self.settings.prewarm.items()) or "none",
        )
        for kind in self.settings.prewarm:
            self.spawn(self._backfill(kind))
        self.started = True

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: once the backend's containers are recovered, until shutdown begins."""
        if self.stopping:
            return False, "stopping"
        if not self.started:
            return False, "recovering the backend's containers"
        return True, "ok"

    async def wait_for_routers(self) -> None:
        """Shutdown, before containers go: routers stopping beside us (``apf-gateway up``
        killed, every child told at once) finish their activations first. Ends when every
        router has deregistered or lost its lease, or after ``router_wait_seconds``."""
        self.stopping = True
        wait = self.settings.router_wait_seconds
        if wait <= 0 or not self.settings.remove_on_exit or not self.core.routers:
            return
        log.info("stopping: waiting up to %gs for %d routers", wait, len(self.core.routers))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while self.core.routers and loop.time() < deadline:  # noqa: ASYNC110 - the pure core signals nothing
            await asyncio.sleep(0.1)
        if self.core.routers:
            log.warning("stopping with routers still registered: %s", sorted(self.core.routers))

    async def stop(self) -> None:
        self.stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.settings.remove_on_exit:
            grace = self.settings.grace_seconds
            await asyncio.gather(
                *(self.remove(cid, grace, "shutdown") for cid in list(self.handles)),
                return_exceptions=True,
            )
        await self.backend.close()
        if self._http is not None:
            await self._http.close()
        if self.store is not None:
            await self.store.close()

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "start() first"
        return self._http

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
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
        self.metrics.namespace_seen(action.namespace)
        for _ in range(self.settings.max_evictions_per_acquire + 1):
            grant = self.core.acquire(
                router_id, action, count=count, known=known, allow_proxy=allow_proxy
            )
            if grant.reject is not None:
                self.metrics.quota_rejections.labels(action.namespace, grant.limit).inc()
                raise AcquireRejected(grant.reject)
            if grant.create:
                created = await asyncio.gather(*(self._create(c) for c in grant.create))
                made = [c for c in created if c is not None]
                if not made:
                    raise AcquireRejected("The container backend could not start a container.", 503)
                return Grant(assigned=made)
            if grant.evict:
                if not await self.disruptions.evict_for_space(grant.evict):
                    self.metrics.quota_rejections.labels(action.namespace, "evictions").inc()
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
        source = "stem"
        try:
            handle = await self._take_stem(c, labels)
            if handle is None:
                source = "new"
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
                    secret=new_secret(),
                )
                handle = await self.backend.create(spec)
        except BackendError as exc:
            log.warning("cannot create container for %s: %s", c.action.key, exc)
            self.metrics.creations.labels(a.kind, source, "failed").inc()
            self.core.removed(c.id)
            return None
        self.metrics.creations.labels(a.kind, source, "ok").inc()
        log.info("created container %s for %s (%s) for router %s", c.id, a.key, source, c.owner)
        self.handles[c.id] = handle
        done = self.core.created(c.id, handle.url, self.backend.agent(handle), handle.secret)
        if done is None:  # removed meanwhile
            self.spawn(self.remove(c.id, 0.0, "orphaned"))
        return done

    async def _take_stem(self, c: Container, labels: dict[str, str]) -> ContainerHandle | None:
        stems = self.stems.get(c.action.kind)
        a = c.action
        if not stems or a.memory_mb != STEM_MEMORY_MB or a.image or a.pod_template:
            return None  # a stem cell runs our image with the default pod
        stem = stems.pop(0)
        self.spawn(self._backfill(c.action.kind, self.settings.backfill_delay_seconds))
        if await self.backend.status(stem) is not Status.RUNNING:  # died while waiting
            self.handles.pop(stem.id, None)
            self.spawn(self.backend.remove(stem, 0.0))
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
                    new_container_id(),
                    kind,
                    STEM_MEMORY_MB,
                    None,
                    {"role": "stem", "kind": kind},
                    secret=new_secret(),
                )
                handle = await self.backend.create(spec)
                self.metrics.creations.labels(kind, "prewarm", "ok").inc()
                self.handles[handle.id] = handle
                self.stems.setdefault(kind, []).append(handle)
        except BackendError as exc:
            self.metrics.creations.labels(kind, "prewarm", "failed").inc()
            log.warning("cannot prewarm a %s container: %s", kind, exc)
        finally:
            self._backfilling.discard(kind)

    async def remove(self, cid: str, grace: float, reason: str) -> None:
        """Remove a container the core has begun removing (or never knew)."""
        handle = self.handles.pop(cid, None)
        try:
            if handle is not None:
                await self.backend.remove(handle, grace)
                self.metrics.removals.labels(reason).inc()
                log.info("removed container %s (%s)", cid, reason)
        finally:
            self.core.removed(cid)

    def _on_router_lost(self, lease: RouterLease, containers: list[Container]) -> None:
        log.warning(
            "router %s is gone (lease expired or restarted): %d containers quarantined until "
            "their activations' timeout: %s",
            lease.id,
            len(containers),
            " ".join(c.id for c in containers) or "-",
        )
        if self.store is not None and lease.incarnation:
            self.spawn(self._record_lost(self.store, lease.id, lease.incarnation))

    @staticmethod
    async def _record_lost(store: Store, router_id: str, incarnation: str) -> None:
        """The activations the lost router process had in flight get their ``whisk internal
        error`` record (only that process's: a new one under the same id may be running).
        A router that was only slow, not dead, replaces it with the real one later."""
        try:
            records = await store.recover_in_flight(
                router_id, int(time.time() * 1000), incarnation=incarnation
            )
        except StoreError as exc:
            log.error("cannot record the activations router %s left: %s", router_id, exc)
            return
        if records:
            log.warning(
                "recorded %d activations router %s left unfinished as whisk internal errors: %s",
                len(records),
                router_id,
                " ".join(r["activationId"] for r in records),
            )

    def _on_reclaim(self, c: Container) -> None:
        if c.drain is not None:
            self.disruptions.drained(c)
        else:
            self.spawn(self.remove(c.id, self.disruptions.grace(c), "unassigned-idle"))

    async def wait_idle(self) -> None:
        """Wait for background removals (tests and shutdown)."""
        while self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
