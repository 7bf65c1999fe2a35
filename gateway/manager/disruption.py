"""Taking containers away: give-backs, evictions for space, policy disruptions and drains.

A container that holds no work (given back idle, failed, a ``Never`` container drained once
its owner confirmed it idle, an idle one evicted for space) is ``remove``d. A ``Never``
container drained while busy is never waited for here: its owner stops routing to it at once
and answers "waiting"; the container is *draining* (``ManagerCore.begin_drain``) and is
removed when the owner gives it back after its activation ended, so a drain answers promptly
with what it is still waiting for. A graceful stop of
one that may be busy (``OnUpgrade``/``Always`` drains and evictions) is a voluntary
disruption: it goes through the backend's ``evict`` when it has one, so the platform's
disruption budgets apply (the Eviction API on Kubernetes). A refused eviction keeps the
container (warm and unowned again, reusable) and is retried every ``eviction_retry_seconds``
on the manager's clock, never forced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from gateway.manager.backends.base import Backend, BackendError, ContainerHandle, can_evict
from gateway.manager.core import ManagerCore
from gateway.manager.metrics import ManagerMetrics
from gateway.manager.model import Container, CState
from gateway.manager.policy import Disruption, Reason

log = logging.getLogger("gateway.manager")

FAILURES = ("timeout", "failed", "init-failed")  # give-backs that get no grace period
#: How long a router may take to answer a give-back request beyond the wait asked of it.
ANSWER_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Result:
    """What became of one container of a drain or eviction, and why (when not removed)."""

    outcome: str  # "removed", "waiting" (removed once idle), "kept" or "refused"
    why: str = ""


REMOVED = Result("removed")


class HostSettings(Protocol):
    @property
    def grace_seconds(self) -> float: ...

    @property
    def eviction_retry_seconds(self) -> float: ...


class Host(Protocol):
    """What disruptions use of the manager: ``service.ManagerService``, which owns them (and so
    is not imported here)."""

    @property
    def core(self) -> ManagerCore: ...

    @property
    def metrics(self) -> ManagerMetrics: ...

    @property
    def settings(self) -> HostSettings: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def handles(self) -> dict[str, ContainerHandle]: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def http(self) -> aiohttp.ClientSession: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    async def remove(self, cid: str, grace: float, reason: str) -> None: ...


class Disruptions:
    def __init__(self, service: Host) -> None:
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
        if c.state is CState.DRAINING and reason not in FAILURES:
            self.core.begin_removal(cid)
            self.drained(c)
            return True
        self.core.begin_removal(cid)
        grace = 0.0 if reason in FAILURES else self.grace(c)
        self.service.spawn(self.service.remove(cid, grace, reason))
        return True

    def drained(self, c: Container) -> None:
        """A draining container is known idle now (already ``begin_removal``): remove it."""
        reason = c.drain or Reason.UPGRADE.value
        self.metrics.evictions.labels(c.action.eviction.value, reason, "removed-idle").inc()
        self.service.spawn(self.service.remove(c.id, self.grace(c), reason))

    async def evict_for_space(self, candidates: list[Container]) -> bool:
        """The first candidate its owner gives back idle is removed (quota)."""
        for c in candidates:
            if c.state is CState.ASSIGNED and c.owner is not None:
                url = self.core.routers[c.owner].url if c.owner in self.core.routers else None
                if url is not None and await self.ask_give_back(url, c.id, True, 0.0) != "done":
                    continue
            if self.core.begin_removal(c.id) is None:
                continue
            log.info("evicting idle %s (%s) to make space", c.id, c.action.key)
            self._count(c, Reason.SPACE, "stopped")
            self.service.spawn(self.service.remove(c.id, self.grace(c), Reason.SPACE.value))
            return True
        return False

    async def disrupt(self, cid: str, reason: Reason) -> tuple[Disruption, Result]:
        """The policy's decision, and what became of the container."""
        c = self.core.containers[cid]
        decision = self.core.disruption(cid, reason)
        if decision is Disruption.REFUSE:
            self._count(c, reason, "refused")
            return decision, Result("refused", f"eviction.safe={c.action.eviction.value}")
        return decision, await self._disrupt(c, decision, reason)

    async def drain(
        self, namespace: str | None, action: str | None
    ) -> tuple[dict[str, str], dict[str, Result]]:
        """Upgrade-style drain: (decision per container, what became of each)."""
        chosen = self.core.select(namespace, action)
        decisions = {c.id: self.core.disruption(c.id, Reason.UPGRADE) for c in chosen}
        results = await asyncio.gather(
            *(self._disrupt(c, decisions[c.id], Reason.UPGRADE) for c in chosen)
        )
        return (
            {cid: d.value for cid, d in decisions.items()},
            {c.id: result for c, result in zip(chosen, results, strict=True)},
        )

    async def _disrupt(self, c: Container, decision: Disruption, reason: Reason) -> Result:
        """Remove ``c`` as ``decision`` says, or say why it is kept or still waited for."""
        grace = self.grace(c)
        if decision is Disruption.WHEN_IDLE:
            waiting = await self._when_idle(c, reason)
            if waiting is not None:
                return waiting
        elif c.state is CState.ASSIGNED and c.owner in self.core.routers:
            await self.ask_give_back(self.core.routers[c.owner].url, c.id, False, grace)
        if self.core.begin_removal(c.id) is None:
            return REMOVED
        if decision is Disruption.WHEN_IDLE or not can_evict(self.service.backend):
            idle = decision is Disruption.WHEN_IDLE
            self._count(c, reason, "removed-idle" if idle else "stopped")
            await self.service.remove(c.id, grace, reason.value)  # idle: disrupts nothing
            return REMOVED
        return await self._evict(c, grace, reason)

    async def _when_idle(self, c: Container, reason: Reason) -> Result | None:
        """A ``Never`` container: None when it is idle and unrouted (remove it now), else
        what it is waiting for (nothing here waits for a running activation)."""
        if c.state is CState.DRAINING:
            return Result("waiting", _waiting_for(c))
        if c.state is CState.QUARANTINED:
            # its last owner may still be running an activation in it: never while busy
            self.core.begin_drain(c.id, reason.value)
            return Result("waiting", _waiting_for(c))
        if c.state is not CState.ASSIGNED or c.owner not in self.core.routers:
            return None
        answer = await self.ask_give_back(self.core.routers[c.owner].url, c.id, False, None)
        if answer == "waiting":
            if self.core.begin_drain(c.id, reason.value) is not None:
                return Result("waiting", _waiting_for(c))
            return REMOVED  # its activation ended and the owner gave it back meanwhile
        if answer != "done":
            self._count(c, reason, "kept")
            return Result("kept", "its owner did not confirm it is idle; drain again later")
        return None

    async def _evict(self, c: Container, grace: float, reason: Reason) -> Result:
        """A graceful stop through the backend's eviction; kept (and retried) if refused."""
        backend = self.service.backend
        assert can_evict(backend)
        handle = self.service.handles.get(c.id)
        if handle is None:
            self.core.removed(c.id)
            return REMOVED
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
            return REMOVED
        self._count(c, reason, "budget-refused")
        self.core.restore(c.id)
        self._retry(c.id, reason)
        log.info("%s kept: %s", c.id, why)
        retry = self.service.settings.eviction_retry_seconds
        return Result("kept", f"{why}; kept, retried in {retry:g} s")

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
    ) -> str | None:
        """The owner's answer: ``done`` (no longer routed to, idle or ``wait`` over),
        ``busy`` (``only_if_idle`` refused) or ``waiting`` (``wait`` None: routing stopped,
        the owner gives it back once idle); None when the owner did not answer."""
        http = self.service.http
        body = {"only_if_idle": only_if_idle, "wait_seconds": wait}
        timeout = aiohttp.ClientTimeout(total=(wait or 0.0) + ANSWER_SECONDS)
        try:
            async with http.post(
                f"{router_url}/_platform/v1/containers/{cid}/giveback", json=body, timeout=timeout
            ) as resp:
                data = await resp.json() if resp.status in (200, 202, 409) else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("router %s did not answer give-back of %s: %r", router_url, cid, exc)
            return None
        result = data.get("result") if isinstance(data, dict) else None
        return result if isinstance(result, str) else None


def _waiting_for(c: Container) -> str:
    if c.owner is None or c.quarantine_timer is not None:
        return (
            "quarantined: its last owner may still be running an activation in it; removed "
            "when the quarantine ends (the action's time limit has passed by then)"
        )
    return f"busy: its owner {c.owner} gives it back when its activation ends"
