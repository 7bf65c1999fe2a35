"""ManagerService over an in-memory backend: recovery after restart, drains that must wait
for a container (Never + quarantined), and a backend that cannot start containers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.manager.backends.base import (
    BackendError,
    ContainerGone,
    ContainerHandle,
    ContainerSpec,
    Status,
)
from gateway.manager.core import ActionSpec, ManagerSettings
from gateway.manager.service import AcquireRejected, ManagerService, ServiceSettings
from gateway.platform.actions import EvictionSafe
from gateway.store import open_store
from gateway.testing import FakeEventClock


class MemoryBackend:
    """Containers that exist only in a dict; ``broken`` makes every create fail."""

    name = "memory"

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.live: dict[str, ContainerHandle] = {}
        self.removed: list[str] = []

    async def create(self, spec: ContainerSpec) -> ContainerHandle:
        if self.broken:
            raise BackendError("no capacity")
        handle = ContainerHandle(spec.id, f"http://mem/{spec.id}", dict(spec.labels), 0.0)
        self.live[spec.id] = handle
        return handle

    async def remove(self, handle: ContainerHandle, grace: float) -> None:
        if self.live.pop(handle.id, None) is not None:
            self.removed.append(handle.id)

    async def pause(self, handle: ContainerHandle) -> None:
        if handle.id not in self.live:
            raise ContainerGone(handle.id)

    resume = pause

    async def status(self, handle: ContainerHandle) -> Status:
        return Status.RUNNING if handle.id in self.live else Status.GONE

    async def list(self) -> list[ContainerHandle]:
        return list(self.live.values())

    async def relabel(self, handle: ContainerHandle, labels: dict[str, str]) -> ContainerHandle:
        new = ContainerHandle(handle.id, handle.url, labels, handle.created)
        self.live[handle.id] = new
        return new

    def agent(self, handle: ContainerHandle) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        pass


def recovered(backend: MemoryBackend, cid: str, safe: EvictionSafe) -> None:
    spec = ActionSpec("guest", cid, "0.0.1", "python:3", eviction=safe)
    labels = {"role": "action", "action": json.dumps(spec.to_json())}
    backend.live[cid] = ContainerHandle(cid, f"http://mem/{cid}", labels, 0.0)


def settings(**kw: Any) -> ServiceSettings:
    return ServiceSettings(core=ManagerSettings(**kw), remove_on_exit=False)


async def test_restart_recovers_and_drain_waits_out_quarantined_never_containers() -> None:
    """A quarantined Never container may still be busy: the drain answers at once that it
    waits for it, and it is removed (never handed out again) when the quarantine ends."""

    backend, clock = MemoryBackend(), FakeEventClock()
    recovered(backend, "c-never", EvictionSafe.NEVER)
    recovered(backend, "c-always", EvictionSafe.ALWAYS)
    service = ManagerService(backend, settings(lease_seconds=10.0), clock=clock)
    await service.start()
    try:
        states = {c.id: c.state.value for c in service.core.containers.values()}
        assert states == {"c-never": "quarantined", "c-always": "quarantined"}
        decisions, results = await service.disruptions.drain(None, None)
        assert decisions == {"c-never": "when-idle", "c-always": "graceful-stop"}
        assert {cid: r.outcome for cid, r in results.items()} == {
            "c-never": "waiting",
            "c-always": "removed",
        }
        assert "quarantined" in results["c-never"].why
        assert backend.removed == ["c-always"]
        service.core.register("r1", "http://r1", ["c-never"])  # not handed back to anyone
        assert service.core.containers["c-never"].state.value == "draining"
        again = (await service.disruptions.drain(None, None))[1]
        assert again["c-never"].outcome == "waiting"
        clock.advance(2 * 10.0 + 1.0)  # adoption quarantine: two leases plus the margin
        await service.wait_idle()
        assert backend.removed == ["c-always", "c-never"]
        assert "c-never" not in service.core.containers
    finally:
        await service.stop()


async def test_backend_failure_is_a_503_and_frees_the_quota() -> None:
    service = ManagerService(MemoryBackend(broken=True), settings(default_quota=1))
    await service.start()
    try:
        service.core.register("r1", "http://r1")
        spec = ActionSpec("guest", "a", "0.0.1", "python:3")
        for _ in range(2):  # the failed reservation does not hold the only quota slot
            with pytest.raises(AcquireRejected) as exc:
                await service.acquire("r1", spec, count=1, known=[], allow_proxy=True)
            assert exc.value.status == 503
    finally:
        await service.stop()


class BudgetBackend(MemoryBackend):
    """With the optional ``evict``: refused while ``budget`` is 0 (a disruption budget)."""

    def __init__(self) -> None:
        super().__init__()
        self.budget = 0
        self.evictions: list[tuple[str, bool]] = []

    async def evict(self, handle: ContainerHandle, *, grace: float) -> bool:
        allowed = self.budget > 0
        self.evictions.append((handle.id, allowed))
        if allowed:
            self.budget -= 1
            del self.live[handle.id]
        return allowed


async def test_upgrade_drain_evicts_and_a_refused_eviction_is_kept_then_retried() -> None:
    backend, clock = BudgetBackend(), FakeEventClock()
    service = ManagerService(
        backend,
        ServiceSettings(remove_on_exit=False, eviction_retry_seconds=5.0),
        clock=clock,
    )
    await service.start()
    try:
        service.core.register("r1", "http://127.0.0.1:9")
        made = {}
        for safe in (EvictionSafe.NEVER, EvictionSafe.ON_UPGRADE):
            spec = ActionSpec("guest", safe.value, "0.0.1", "python:3", eviction=safe)
            grant = await service.acquire("r1", spec, count=1, known=[], allow_proxy=False)
            made[safe] = grant.assigned[0].id
        service.core.deregister("r1")  # both unowned: nobody to ask for them back
        never, upgrade = made[EvictionSafe.NEVER], made[EvictionSafe.ON_UPGRADE]

        decisions, results = await service.disruptions.drain(None, None)
        assert decisions == {never: "when-idle", upgrade: "graceful-stop"}
        assert backend.removed == [never]  # idle: a plain removal, no eviction
        assert backend.evictions == [(upgrade, False)]  # refused: not forced
        assert results[never].outcome == "removed" and results[upgrade].outcome == "kept"
        assert "refused the eviction" in results[upgrade].why
        assert service.core.containers[upgrade].state.value == "unassigned"  # still usable

        clock.advance(5.0)  # the retry: refused again
        await service.wait_idle()
        assert backend.evictions[-1] == (upgrade, False) and upgrade in backend.live
        backend.budget = 1
        clock.advance(5.0)
        await service.wait_idle()
        assert backend.evictions[-1] == (upgrade, True)
        assert upgrade not in service.core.containers and backend.removed == [never]
    finally:
        await service.stop()


async def test_a_router_whose_lease_expires_has_its_activations_recorded(tmp_path: Path) -> None:
    """Routers with unique ids never come back under the same id: the manager, which notices
    the lost lease, records what the router had marked in flight."""

    url = f"sqlite:///{tmp_path / 'platform.db'}"
    store = open_store(url)
    await store.open()
    lost = {
        "activationId": "a" * 32,
        "namespace": "guest",
        "name": "slow",
        "start": 1000,
        "end": 1000,
        "duration": 0,
        "response": {"status": "whisk internal error", "statusCode": 3, "success": False},
    }
    await store.mark_in_flight("host-123", [lost], incarnation="p1")
    running = {**lost, "activationId": "b" * 32}
    await store.mark_in_flight("host-123", [running], incarnation="p2")
    clock = FakeEventClock()
    service = ManagerService(
        MemoryBackend(),
        ServiceSettings(core=ManagerSettings(lease_seconds=5), store_url=url),
        clock=clock,
    )
    await service.start()
    try:
        service.core.register("host-123", "http://127.0.0.1:1", incarnation="p1")
        service.core.register("host-456", "http://127.0.0.1:2", incarnation="q1")
        clock.advance(4)
        service.core.renew("host-456")
        await service.wait_idle()
        assert await store.get_activation("guest", "a" * 32) is None  # lease still running
        clock.advance(2)
        await service.wait_idle()
        record = await store.get_activation("guest", "a" * 32)
        assert record is not None
        assert record["response"]["status"] == "whisk internal error"
        assert record["end"] >= record["start"]
        # a mark of another process under the id (say, started meanwhile) is not its to take
        assert await store.get_activation("guest", "b" * 32) is None
        # a new process taking over a live lease: the old one's marks are recorded at once
        await store.mark_in_flight(
            "host-456", [{**lost, "activationId": "c" * 32}], incarnation="q1"
        )
        service.core.register("host-456", "http://127.0.0.1:3", incarnation="q2")
        await service.wait_idle()
        assert await store.get_activation("guest", "c" * 32) is not None
    finally:
        await service.stop()
        await store.close()
