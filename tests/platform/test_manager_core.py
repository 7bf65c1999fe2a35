"""ManagerCore in simulated time: division, proxies, leases, quarantine, quota, eviction."""

from __future__ import annotations

import pytest

from gateway.manager.core import (
    ActionSpec,
    Container,
    CState,
    ManagerCore,
    ManagerSettings,
    UnknownRouter,
)
from gateway.platform.actions import EvictionSafe
from gateway.testing import FakeEventClock


def spec(name: str = "a", ns: str = "guest", **kw: object) -> ActionSpec:
    return ActionSpec(namespace=ns, name=name, version="0.0.1", kind="python:3", **kw)  # type: ignore[arg-type]


def make(**kw: object) -> tuple[ManagerCore, FakeEventClock, list[Container]]:
    clock = FakeEventClock()
    reclaimed: list[Container] = []
    core = ManagerCore(clock, ManagerSettings(**kw), reclaimed.append)  # type: ignore[arg-type]
    return core, clock, reclaimed


def create(core: ManagerCore, router: str, action: ActionSpec, count: int = 1) -> list[str]:
    grant = core.acquire(router, action, count=count)
    assert grant.kind == "create", grant
    for c in grant.create:
        core.created(c.id, f"http://127.0.0.1/{c.id}", {})
    return [c.id for c in grant.create]


def test_unknown_router_is_refused() -> None:
    core, _, _ = make()
    with pytest.raises(UnknownRouter):
        core.acquire("r1", spec())


def test_containers_are_divided_disjointly() -> None:
    core, _, _ = make()
    core.register("r1", "u1")
    core.register("r2", "u2")
    a = spec(instances=10)
    ids1 = create(core, "r1", a, 2)
    ids2 = create(core, "r2", a, 1)
    assert {c.id for c in core.assignments("r1")} == set(ids1)
    assert {c.id for c in core.assignments("r2")} == set(ids2)
    assert not set(ids1) & set(ids2)


def test_proxy_named_when_fewer_containers_than_routers() -> None:
    core, _, _ = make()
    core.register("r1", "u1")
    core.register("r2", "u2")
    a = spec()
    create(core, "r1", a)
    grant = core.acquire("r2", a)
    assert grant.kind == "proxy"
    assert [r.url for r in grant.proxy] == ["u1"]
    # a proxied request must not be proxied again: the owner-less router gets its own
    assert core.acquire("r2", a, allow_proxy=False).kind == "create"


def test_known_assignments_are_returned_before_creating() -> None:
    core, _, _ = make()
    core.register("r1", "u1")
    ids = create(core, "r1", spec())
    grant = core.acquire("r1", spec(), known=[])
    assert [c.id for c in grant.assigned] == ids
    assert core.acquire("r1", spec(), known=ids).kind == "create"


def test_expired_lease_quarantines_then_reassigns() -> None:
    core, clock, _ = make(lease_seconds=5)
    core.register("r1", "u1")
    core.register("r2", "u2")
    a = spec(timeout_ms=3000)
    (cid,) = create(core, "r1", a)
    clock.advance(4)
    core.renew("r2")
    clock.advance(2)  # r1 expired at t=5
    assert "r1" not in core.routers
    assert core.containers[cid].state is CState.QUARANTINED
    core.renew("r2")
    assert core.acquire("r2", a, allow_proxy=False).kind == "create"  # not handed out yet
    clock.advance(4.1)  # 3 s timeout + 1 s margin after expiry
    assert core.containers[cid].state is CState.UNASSIGNED
    core.renew("r2")
    grant = core.acquire("r2", a)
    assert [c.id for c in grant.assigned] == [cid]


def test_reregistering_router_reclaims_its_holdings() -> None:
    core, clock, _ = make(lease_seconds=5)
    core.register("r1", "u1")
    (cid,) = create(core, "r1", spec())
    clock.advance(6)
    assert core.containers[cid].state is CState.QUARANTINED
    held = core.register("r1", "u1", holdings=[cid])
    assert [c.id for c in held] == [cid]
    assert core.containers[cid].state is CState.ASSIGNED


def test_a_restarted_router_does_not_inherit_its_predecessors_busy_containers() -> None:
    """A router process that died mid-activation and is started again under the same id
    (``apf-gateway up``) registers while the old lease still runs, holding nothing: the old
    containers may still be running the dead process's activations, so they wait out the
    action's timeout instead of being handed to the new process."""
    core, clock, _ = make(lease_seconds=10)
    core.register("r1", "u1")
    (kept,) = create(core, "r1", spec("a", timeout_ms=5000))
    (busy,) = create(core, "r1", spec("b", timeout_ms=5000))
    clock.advance(1)
    held = core.register("r1", "u1-again", holdings=[kept])
    assert [c.id for c in held] == [kept]
    assert core.containers[busy].state is CState.QUARANTINED
    assert core.acquire("r1", spec("b", timeout_ms=5000)).kind == "create"
    clock.advance(6.5)  # the action's timeout and the margin: whatever ran there has ended
    assert core.containers[busy].state is CState.UNASSIGNED


def test_the_same_process_registering_again_keeps_its_containers() -> None:
    """Only another process (incarnation) under the id means the old one died."""
    core, _, _ = make(lease_seconds=10)
    core.register("r1", "u1", incarnation="p1")
    (cid,) = create(core, "r1", spec("a"))
    assert [c.id for c in core.register("r1", "u1", incarnation="p1")] == [cid]
    assert core.containers[cid].state is CState.ASSIGNED
    assert core.register("r1", "u1", incarnation="p2") == []
    assert core.containers[cid].state is CState.QUARANTINED


def test_adopted_containers_wait_for_their_owner() -> None:
    core, _, _ = make(lease_seconds=5)
    core.adopt("c-1", spec(), "url", {})
    core.register("r2", "u2")
    assert core.acquire("r2", spec(), allow_proxy=False).kind == "create"
    core.register("r1", "u1", holdings=["c-1"])
    assert core.containers["c-1"].owner == "r1"


def test_deregistered_router_frees_containers_for_reuse() -> None:
    core, _, _ = make()
    core.register("r1", "u1")
    core.register("r2", "u2")
    (cid,) = create(core, "r1", spec())
    core.deregister("r1")
    assert [c.id for c in core.acquire("r2", spec()).assigned] == [cid]


def test_unassigned_containers_are_reclaimed_after_idle_timeout() -> None:
    core, clock, reclaimed = make(unassigned_idle_seconds=60)
    core.register("r1", "u1")
    (cid,) = create(core, "r1", spec())
    core.deregister("r1")
    clock.advance(59)
    assert not reclaimed
    clock.advance(1)
    assert [c.id for c in reclaimed] == [cid]
    assert core.containers[cid].state is CState.REMOVING


def test_instances_limit() -> None:
    core, _, _ = make()
    core.register("r1", "u1")
    create(core, "r1", spec(instances=2), 5)
    grant = core.acquire("r1", spec(instances=2), known=list(core.containers))
    assert grant.reject is not None and "instance limit (2" in grant.reject


@pytest.mark.parametrize(
    ("safe", "evictable"),
    [(EvictionSafe.NEVER, False), (EvictionSafe.ON_UPGRADE, False), (EvictionSafe.ALWAYS, True)],
)
def test_quota_exhausted_evicts_only_when_policy_allows(
    safe: EvictionSafe, evictable: bool
) -> None:
    core, _, _ = make(default_quota=2)
    core.register("r1", "u1")
    create(core, "r1", spec("other", eviction=safe, instances=5), 2)
    grant = core.acquire("r1", spec("new"))
    if evictable:
        assert grant.kind == "evict"
        assert all(c.action.name == "other" for c in grant.evict)
        core.begin_removal(grant.evict[0].id)
        assert core.acquire("r1", spec("new")).kind == "create"
    else:
        assert grant.reject is not None
        assert "quota of 2 containers" in grant.reject


def test_quota_never_evicts_same_action_or_other_namespace() -> None:
    core, _, _ = make(default_quota=1)
    core.register("r1", "u1")
    create(core, "r1", spec("a", eviction=EvictionSafe.ALWAYS))
    create(core, "r1", spec("b", ns="other", eviction=EvictionSafe.ALWAYS))
    grant = core.acquire("r1", spec("a", eviction=EvictionSafe.ALWAYS), known=list(core.containers))
    assert grant.reject is not None


def test_quota_override_per_namespace() -> None:
    core, _, _ = make(default_quota=1, quota_overrides={"big": 3})
    core.register("r1", "u1")
    assert len(create(core, "r1", spec(ns="big", instances=9), 5)) == 3
