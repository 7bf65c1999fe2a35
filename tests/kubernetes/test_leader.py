"""Lease-based leader election: the pure core on a fake clock, then its REST calls."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import NS, BackendFactory
from k8s_fakeapi import FakeCluster
from test_k8s_backend import action_spec

from gateway.manager.backends.k8s.api import KubeApi
from gateway.manager.backends.k8s.calls import rbac_triples
from gateway.manager.backends.k8s.lease import KubeLeaseStore
from gateway.manager.leader import (
    Conflict,
    ElectionConfig,
    LeaderElection,
    LeaseRecord,
    election_step,
    release,
)
from gateway.platform.actions import EvictionSafe
from gateway.testing import FakeEventClock

CONFIG = ElectionConfig(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
EPOCH = 1_800_000_000.0


class MemoryStore:
    """A Lease with optimistic concurrency; ``down`` makes every call fail for one caller."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0

    def _stamp(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = dataclasses.replace(record, version=str(self.version))
        return self.record

    async def get(self) -> LeaseRecord | None:
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is not None:
            raise Conflict("exists")
        return self._stamp(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        assert self.record is not None
        if record.version != self.record.version:
            raise Conflict("stale")
        return self._stamp(record)


class Unreachable:
    async def get(self) -> LeaseRecord | None:
        raise OSError("connection refused")

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        raise OSError("connection refused")

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        raise OSError("connection refused")


def candidate(name: str, clock: FakeEventClock) -> LeaderElection:
    return LeaderElection(name, CONFIG, clock, lambda: EPOCH + clock.now())


async def test_first_candidate_leads_the_other_stays_standby() -> None:
    clock, store = FakeEventClock(), MemoryStore()
    a, b = candidate("a", clock), candidate("b", clock)
    assert await election_step(a, store) is True
    assert await election_step(b, store) is False
    for _ in range(20):
        clock.advance(CONFIG.retry_period)
        assert await election_step(a, store) is True
        assert await election_step(b, store) is False
    assert store.record is not None
    assert store.record.holder == "a"
    assert store.record.transitions == 0
    assert store.record.acquire_time == EPOCH  # kept across renewals
    assert store.record.renew_time == EPOCH + clock.now()


async def test_standby_takes_over_within_the_lease_duration_of_a_crashed_leader() -> None:
    clock, store = FakeEventClock(), MemoryStore()
    a, b = candidate("a", clock), candidate("b", clock)
    await election_step(a, store)
    for _ in range(5):
        clock.advance(CONFIG.retry_period)
        await election_step(a, store)
        await election_step(b, store)
    last_renew = clock.now()  # a crashes right after this renewal
    took_over = None
    while took_over is None:
        clock.advance(CONFIG.retry_period)
        if await election_step(b, store):
            took_over = clock.now()
    assert took_over > last_renew + CONFIG.lease_duration  # not before the lease expired
    assert took_over <= last_renew + CONFIG.lease_duration + 2 * CONFIG.retry_period
    assert store.record is not None
    assert (store.record.holder, store.record.transitions) == ("b", 1)


async def test_a_cut_off_leader_steps_down_before_anyone_can_take_over() -> None:
    clock, store = FakeEventClock(), MemoryStore()
    a, b = candidate("a", clock), candidate("b", clock)
    await election_step(a, store)
    await election_step(b, store)
    cut_at, stepped_down, b_leads = clock.now(), None, None
    while b_leads is None:
        clock.advance(CONFIG.retry_period)
        if not await election_step(a, Unreachable()) and stepped_down is None:
            stepped_down = clock.now()
        if await election_step(b, store):
            b_leads = clock.now()
        assert not (a.is_leader and b.is_leader)
    assert stepped_down is not None
    assert stepped_down - cut_at <= CONFIG.renew_deadline + CONFIG.retry_period
    assert stepped_down < b_leads


async def test_release_lets_the_standby_take_over_in_one_retry_period() -> None:
    clock, store = FakeEventClock(), MemoryStore()
    a, b = candidate("a", clock), candidate("b", clock)
    await election_step(a, store)
    await election_step(b, store)
    await release(a, store)
    assert a.is_leader is False
    assert store.record is not None
    assert (store.record.holder, store.record.duration_seconds) == ("", 1)
    clock.advance(CONFIG.retry_period)
    assert await election_step(b, store) is True


async def test_a_leader_that_sees_another_holder_steps_down() -> None:
    clock, store = FakeEventClock(), MemoryStore()
    a = candidate("a", clock)
    await election_step(a, store)
    assert store.record is not None
    store._stamp(dataclasses.replace(store.record, holder="intruder"))
    clock.advance(CONFIG.retry_period)
    assert await election_step(a, store) is False


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        ElectionConfig(lease_duration=10, renew_deadline=10, retry_period=2)


async def test_lease_rest_calls(cluster: FakeCluster, api_url: str) -> None:
    api_a, api_b = KubeApi(NS, api_url), KubeApi(NS, api_url)
    try:
        clock = FakeEventClock()
        a, b = candidate("manager-a", clock), candidate("manager-b", clock)
        store_a = KubeLeaseStore(api_a, "apf-gateway-manager")
        store_b = KubeLeaseStore(api_b, "apf-gateway-manager")
        base = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
        assert await election_step(a, store_a) is True
        assert [(c.method, c.path, c.status) for c in cluster.calls] == [
            ("GET", f"{base}/apf-gateway-manager", 404),
            ("POST", base, 201),
        ]
        assert cluster.calls[1].body["spec"] == {
            "holderIdentity": "manager-a",
            "leaseDurationSeconds": 15,
            "leaseTransitions": 0,
            "acquireTime": "2027-01-15T08:00:00Z",
            "renewTime": "2027-01-15T08:00:00Z",
        }
        assert await election_step(b, store_b) is False
        clock.advance(2.0)
        assert await election_step(a, store_a) is True
        put = cluster.calls[-1]
        assert (put.method, put.path, put.status) == ("PUT", f"{base}/apf-gateway-manager", 200)
        created = cluster.objects[("leases", NS, "apf-gateway-manager")]
        read_version = int(created["metadata"]["resourceVersion"]) - 1
        assert put.body["metadata"]["resourceVersion"] == str(read_version)  # optimistic lock
        assert put.body["spec"]["renewTime"] == "2027-01-15T08:00:02Z"
        # two writers with the same read: the second gets 409 and stays standby
        current = await store_b.get()
        assert current is not None
        stale = dataclasses.replace(current, holder="manager-b")
        await store_a.update(dataclasses.replace(current, renew_time=EPOCH + 3))
        with pytest.raises(Conflict):
            await store_b.update(stale)
        assert cluster.calls[-1].status == 409
    finally:
        await api_a.close()
        await api_b.close()


async def test_the_role_grants_exactly_what_the_code_calls(
    cluster: FakeCluster, api_url: str, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    handle = await backend.create(action_spec("c-000000000100", EvictionSafe.ALWAYS))
    handle = await backend.relabel(handle, dict(handle.labels))
    other = await backend.create(action_spec("c-000000000101"))
    await backend.evict(handle, grace=1)
    await backend.remove(other, 1)
    clock = FakeEventClock()
    store = KubeLeaseStore(backend.api, "apf-gateway-manager")
    first = candidate("x", clock)
    await election_step(first, store)
    await election_step(first, store)
    assert cluster.rbac_used() == rbac_triples()
