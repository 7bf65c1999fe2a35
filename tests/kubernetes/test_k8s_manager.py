"""The real ManagerService driving the Kubernetes backend (fake API server): the backend
contract holds for the manager's create / restart-adoption / removal paths."""

from __future__ import annotations

import asyncio

from conftest import NS, BackendFactory
from k8s_fakeapi import FakeCluster
from test_k8s_backend import action_spec

from gateway.manager.backends.k8s.eviction import SAFE_LABEL
from gateway.manager.core import ActionSpec, CState, ManagerSettings
from gateway.manager.service import ManagerService, ServiceSettings
from gateway.platform.actions import EvictionSafe
from gateway.testing import FakeEventClock
from tests.support.wait import async_wait_until


def settings(remove_on_exit: bool) -> ServiceSettings:
    return ServiceSettings(core=ManagerSettings(), grace_seconds=1.0, remove_on_exit=remove_on_exit)


async def test_acquire_creates_a_pod_and_a_restarted_manager_adopts_it(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    action = ActionSpec("guest", "hello", "0.0.1", "python:3.11", 512, 2, 60000, 5,
                        EvictionSafe.ON_UPGRADE)  # fmt: skip
    first = ManagerService(await make_backend(), settings(remove_on_exit=False))
    await first.start()
    first.core.register("router-1", "http://127.0.0.1:1")
    grant = await first.acquire("router-1", action, count=1, known=[], allow_proxy=False)
    (container,) = grant.assigned
    pod = cluster.pod(container.id, NS)
    assert pod is not None
    assert container.url == f"http://{pod['status']['podIP']}:8080"
    assert container.agent == {}  # routers never pause pods
    meta = pod["metadata"]
    assert meta["labels"]["apf-gateway.dev/safe-to-evict"] == "true"
    assert meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    (runtime,) = pod["spec"]["containers"]
    assert runtime["resources"]["limits"]["memory"] == "512Mi"
    assert runtime["command"][-2:] == ["--concurrency", "2"]
    await first.stop()
    assert cluster.pod(container.id, NS) is not None  # --keep-containers: the pod survives

    second = ManagerService(await make_backend(), settings(remove_on_exit=True))
    await second.start()
    adopted = second.core.containers[container.id]
    assert adopted.state is CState.QUARANTINED
    assert adopted.action == action
    assert adopted.url == container.url
    await second.stop()
    assert cluster.pod(container.id, NS) is None


async def test_list_during_a_create_leaves_that_pod_alone(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    cluster.auto_ready = False
    backend = await make_backend()
    task = asyncio.ensure_future(backend.create(action_spec("c-000000000201")))
    await async_wait_until(lambda: "c-000000000201" in backend.watch.pods)
    assert await backend.list() == []
    assert cluster.pod("c-000000000201", NS) is not None
    await cluster.make_ready("c-000000000201", NS)
    handle = await task
    assert [h.id for h in await backend.list()] == [handle.id]


async def test_upgrade_drain_uses_the_eviction_api_and_retries_what_the_pdb_refuses(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    """An OnUpgrade action whose pod template (the operator's) keeps the PDB's label: the
    drain's eviction is refused (429), the pod is kept (no DELETE) and evicted on a retry
    once the budget allows."""

    clock = FakeEventClock()
    # the operator's template keeps the PDB's label (an action's may not: apf-gateway.dev/*)
    template = {"metadata": {"labels": {SAFE_LABEL: "false"}}}
    service = ManagerService(
        await make_backend(pod_template=template),
        ServiceSettings(remove_on_exit=False, eviction_retry_seconds=5.0),
        clock=clock,
    )
    await service.start()
    try:
        service.core.register("router-1", "http://127.0.0.1:9")
        action = ActionSpec("guest", "job", "0.0.1", "python:3.11",
                            eviction=EvictionSafe.ON_UPGRADE)  # fmt: skip
        grant = await service.acquire("router-1", action, count=1, known=[], allow_proxy=False)
        cid = grant.assigned[0].id
        service.core.deregister("router-1")
        decisions, results = await service.disruptions.drain(None, None)
        assert decisions == {cid: "graceful-stop"}
        assert results[cid].outcome == "kept"
        assert "refused the eviction" in results[cid].why
        evictions = [c for c in cluster.calls if c.path.endswith(f"/pods/{cid}/eviction")]
        assert [c.status for c in evictions] == [429]
        assert cluster.pod(cid, NS) is not None
        assert service.core.containers[cid].state is CState.UNASSIGNED

        cluster.pod(cid, NS)["metadata"]["labels"][SAFE_LABEL] = "true"  # type: ignore[index]
        clock.advance(5.0)
        await service.wait_idle()
        evictions = [c for c in cluster.calls if c.path.endswith(f"/pods/{cid}/eviction")]
        assert [c.status for c in evictions] == [429, 201]
        assert cluster.pod(cid, NS) is None and cid not in service.core.containers
        assert not [c for c in cluster.calls if c.method == "DELETE"]  # never forced
    finally:
        await service.stop()
