"""Taking containers away: give-backs, evictions for space, policy disruptions and drains.

A container that holds no work (given back idle, failed, a ``Never`` container drained once
its owner confirmed it idle, an idle one evicted for space) is ``remove``d. A graceful stop of
one that may be busy (``OnUpgrade``/``Always`` drains and evictions) is a voluntary
disruption: it goes through the backend's ``evict`` when it has one, so the platform's
disruption budgets apply (the Eviction API on Kubernetes). A refused eviction keeps the
container (warm and unowned again, reusable) and is retried every ``eviction_retry_seconds``
on the manager's clock, never forced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import aiohttp

from gateway.manager.backends.base import BackendError, can_evict
from gateway.manager.model import Container, CState
from gateway.manager.policy import Disruption, Reason

if TYPE_CHECKING:
    from gateway.manager.service import ManagerService

log = logging.getLogger("gateway.manager")

FAILURES = ("timeout", "failed", "init-failed")  # give-backs that get no grace period


class Disruptions:
    def __init__(self, service: ManagerService) -> None:
        self.service = service
        self.core = service.core
        self.metrics = service.metrics
        self._retrying: set[str] = set()  # containers whose refused eviction will be retried

    def grace(self, c: Container) -> float:
        """The action's grace period, else the manager's."""
        if c.action.grace_seconds is not None:
            return float(c.action.grace_seconds)
        return self.service.settings.grace_seconds

    def give_back(self, router_id: str, cid: str, reason: str) -> bool:
        """A router returns a container it owns (idle, failed, old revision)."""
        c = self.core.containers.get(cid)
        if c is None or c.owner != router_id:
            return False
        self.core.begin_removal(cid)
        grace = 0.0 if reason in FAILURES else self.grace(c)
        self.service.spawn(self.service.remove(cid, grace, reason))
        return True

    async def evict_for_space(self, candidates: list[Container]) -> bool:
        """The first candidate its owner gives back idle is removed (quota)."""
        for c in candidates:
            if c.state is CState.ASSIGNED and c.owner is not None:
                url = self.core.routers[c.owner].url if c.owner in self.core.routers else None
                if url is not None and not await self.ask_give_back(url, c.id, True, 0.0):
                    continue
            if self.core.begin_removal(c.id) is None:
                continue
            log.info("evicting idle %s (%s) to make space", c.id, c.action.key)
            self._count(c, Reason.SPACE, "stopped")
            self.service.spawn(self.service.remove(c.id, self.grace(c), Reason.SPACE.value))
            return True
        return False

    async def disrupt(self, cid: str, reason: Reason) -> tuple[Disruption, str | None]:
        """The policy's decision, and why the container was kept despite it (or None)."""
        c = self.core.containers[cid]
        decision = self.core.disruption(cid, reason)
        if decision is Disruption.REFUSE:
            self._count(c, reason, "refused")
            return decision, None
        return decision, await self._disrupt(c, decision, reason)

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
        grace = self.grace(c)
        when_idle = decision is Disruption.WHEN_IDLE
        if when_idle and c.state is CState.QUARANTINED:
            # its last owner may still be running an activation in it: never while busy
            self._count(c, reason, "kept")
            return "quarantined: its last owner may still be using it; drain again later"
        if c.state is CState.ASSIGNED and c.owner in self.core.routers:
            url = self.core.routers[c.owner].url
            answered = await self.ask_give_back(url, c.id, False, None if when_idle else grace)
            if when_idle and not answered:
                self._count(c, reason, "kept")
                return "its owner did not confirm it is idle; drain again later"
        if self.core.begin_removal(c.id) is None:
            return None
        if when_idle or not can_evict(self.service.backend):
            self._count(c, reason, "removed-idle" if when_idle else "stopped")
            await self.service.remove(c.id, grace, reason.value)  # idle: disrupts nothing
            return None
        return await self._evict(c, grace, reason)

    async def _evict(self, c: Container, grace: float, reason: Reason) -> str | None:
        """A graceful stop through the backend's eviction; kept (and retried) if refused."""
        backend = self.service.backend
        assert can_evict(backend)
        handle = self.service.handles.get(c.id)
        if handle is None:
            self.core.removed(c.id)
            return None
        try:
            gone = await backend.evict(handle, grace=grace)
            why = "the platform refused the eviction (a disruption budget)"
        except BackendError as exc:
            gone, why = False, f"the eviction failed: {exc}"
        if gone:
            self._count(c, reason, "stopped")
            self.metrics.removals.labels(reason.value).inc()
            self.service.handles.pop(c.id, None)
            self.core.removed(c.id)
            return None
        self._count(c, reason, "budget-refused")
        self.core.restore(c.id)
        self._retry(c.id, reason)
        log.info("%s kept: %s", c.id, why)
        return f"{why}; kept, retried in {self.service.settings.eviction_retry_seconds:g} s"

    def _retry(self, cid: str, reason: Reason) -> None:
        if cid in self._retrying:
            return
        self._retrying.add(cid)

        def retry() -> None:
            self._retrying.discard(cid)
            c = self.core.containers.get(cid)
            if c is not None and c.state is not CState.REMOVING and not self.service.stopping:
                self.service.spawn(self.disrupt(cid, reason))

        self.core.clock.call_later(self.service.settings.eviction_retry_seconds, retry)

    def _count(self, c: Container, reason: Reason, outcome: str) -> None:
        self.metrics.evictions.labels(c.action.eviction.value, reason.value, outcome).inc()

    async def ask_give_back(
        self, router_url: str, cid: str, only_if_idle: bool, wait: float | None
    ) -> bool:
        http = self.service.http
        body = {"only_if_idle": only_if_idle, "wait_seconds": wait}
        try:
            async with http.post(
                f"{router_url}/_platform/v1/containers/{cid}/giveback", json=body
            ) as resp:
                return resp.status == 200
        except aiohttp.ClientError as exc:
            log.warning("router %s unreachable for give-back of %s: %s", router_url, cid, exc)
            return False
