"""The Kubernetes backend against the in-process fake API server (no real cluster here)."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import NS, BackendFactory
from k8s_fakeapi import FakeCluster

from gateway.manager.backends import load_backend
from gateway.manager.backends.base import (
    BackendError,
    ContainerGone,
    ContainerSpec,
    Status,
)
from gateway.manager.backends.k8s.eviction import CA_ANNOTATION, PDB_NAME, SAFE_LABEL
from gateway.manager.backends.k8s.podspec import render_pod
from gateway.manager.core import ActionSpec
from gateway.platform.actions import EvictionSafe
from tests.support.wait import async_wait_until


def action_spec(
    cid: str, safe: EvictionSafe = EvictionSafe.NEVER, concurrency: int = 1
) -> ContainerSpec:
    action = ActionSpec("guest", "hello", "0.0.1", "python:3.11", 256, concurrency, eviction=safe)
    labels = {
        "role": "action",
        "kind": action.kind,
        "memory": "256",
        "action": json.dumps(action.to_json()),
    }
    return ContainerSpec(cid, action.kind, 256, concurrency, labels, eviction=safe)


def paths(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(c.method, c.path) for c in cluster.calls]


async def test_start_reads_owner_creates_pdb_lists_then_watches(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    await make_backend()
    await async_wait_until(lambda: len(cluster.calls) >= 5)
    base = f"/api/v1/namespaces/{NS}/pods"
    assert paths(cluster)[:5] == [
        ("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/apf-gateway-manager"),
        ("GET", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{PDB_NAME}"),
        ("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"),
        ("GET", base),
        ("GET", base),
    ]
    list_call, watch_call = cluster.calls[3], cluster.calls[4]
    selector = (
        "app.kubernetes.io/managed-by=apf-gateway-manager,apf-gateway.dev/manager=apf-gateway"
    )
    assert list_call.query["labelSelector"] == selector
    assert watch_call.query["watch"] == "true"
    assert watch_call.query["labelSelector"] == selector
    assert watch_call.query["resourceVersion"] == "102"  # the list's version
    pdb = cluster.calls[2].body
    assert pdb["spec"] == {"maxUnavailable": 0, "selector": {"matchLabels": {SAFE_LABEL: "false"}}}


async def test_pdb_is_created_once_per_namespace(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    await make_backend()
    await make_backend()
    creates = [c for c in cluster.calls if c.method == "POST" and "poddisruption" in c.path]
    assert len(creates) == 1


@pytest.mark.parametrize(
    ("safe", "annotation", "label"),
    [
        (EvictionSafe.NEVER, "false", "false"),
        (EvictionSafe.ON_UPGRADE, "false", "true"),
        (EvictionSafe.ALWAYS, "true", "true"),
    ],
)
async def test_create_returns_ready_pod_with_rendered_spec(
    cluster: FakeCluster,
    make_backend: BackendFactory,
    safe: EvictionSafe,
    annotation: str,
    label: str,
) -> None:
    backend = await make_backend()
    handle = await backend.create(action_spec("c-000000000001", safe))
    assert handle.url == "http://10.0.0.11:8080"
    assert handle.labels["role"] == "action"
    assert json.loads(handle.labels["action"])["eviction"] == safe.value
    post = next(c for c in cluster.calls if c.method == "POST" and c.path.endswith("/pods"))
    assert post.path == f"/api/v1/namespaces/{NS}/pods"
    pod = post.body
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "c-000000000001"
    assert meta["annotations"][CA_ANNOTATION] == annotation
    assert meta["labels"][SAFE_LABEL] == label
    assert meta["labels"]["apf-gateway.dev/action"] == "hello"
    assert meta["labels"]["apf-gateway.dev/action-namespace"] == "guest"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "apf-gateway-manager"
    owner_uid = cluster.objects[("deployments", NS, "apf-gateway-manager")]["metadata"]["uid"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "apf-gateway-manager",
            "uid": owner_uid,
            "blockOwnerDeletion": False,
            "controller": False,
        }
    ]
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"cpu": "250m", "memory": "256Mi"},
    }
    assert container["command"][:3] == ["python", "-m", "gateway.runtime"]
    assert container["readinessProbe"]["tcpSocket"] == {"port": "http"}
    assert container["securityContext"]["runAsNonRoot"] is True


async def test_openwhisk_image_for_a_kind(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend(
        images={"python:3.11": "openwhisk/action-python-v3.11"}, runtime_port=9000
    )
    handle = await backend.create(action_spec("c-000000000002", concurrency=4))
    assert handle.url.endswith(":8080")  # OpenWhisk images always serve on 8080
    (container,) = cluster.pod("c-000000000002")["spec"]["containers"]  # type: ignore[index]
    assert container["image"] == "openwhisk/action-python-v3.11"
    assert "command" not in container  # the image's own action proxy
    assert container["readinessProbe"]["tcpSocket"] == {"port": "http"}
    assert {"name": "__OW_ALLOW_CONCURRENT", "value": "true"} in container["env"]


async def test_template_values_win_and_annotation_true_means_always(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    template = {
        "metadata": {"annotations": {CA_ANNOTATION: "true"}, "labels": {"team": "a"}},
        "spec": {"nodeSelector": {"pool": "actions"}, "terminationGracePeriodSeconds": 5},
    }
    backend = await make_backend(pod_template=template)
    await backend.create(action_spec("c-000000000003", EvictionSafe.NEVER))
    pod = cluster.pod("c-000000000003")
    assert pod is not None
    meta = pod["metadata"]
    assert meta["annotations"][CA_ANNOTATION] == "true"
    assert meta["labels"][SAFE_LABEL] == "true"  # Always, not the action's Never
    assert meta["annotations"]["apf-gateway.dev/eviction-safe"] == "Always"
    assert meta["labels"]["team"] == "a"
    assert pod["spec"]["nodeSelector"] == {"pool": "actions"}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30  # the action's, not the template's
    assert any("implies eviction.safe Always" in w for w in backend.warnings)


async def test_template_label_kept_with_warning(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend(pod_template={"metadata": {"labels": {SAFE_LABEL: "true"}}})
    await backend.create(action_spec("c-000000000004", EvictionSafe.NEVER))
    meta = cluster.pod("c-000000000004")["metadata"]  # type: ignore[index]
    assert meta["labels"][SAFE_LABEL] == "true"
    assert meta["annotations"][CA_ANNOTATION] == "false"
    assert any(SAFE_LABEL in w and "kept" in w for w in backend.warnings)


async def test_failed_pod_is_deleted_and_create_raises(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    cluster.auto_ready = False
    backend = await make_backend()
    task = asyncio.ensure_future(backend.create(action_spec("c-000000000005")))
    await async_wait_until(lambda: cluster.pod("c-000000000005") is not None)
    waiting = {"reason": "ImagePullBackOff", "message": "no such image"}
    await cluster.set_status(
        "c-000000000005",
        NS,
        {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "runtime",
                    "ready": False,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": {"waiting": waiting},
                }
            ],
        },
    )
    with pytest.raises(BackendError, match="ImagePullBackOff"):
        await task
    delete = [c for c in cluster.calls if c.method == "DELETE"]
    assert [(c.path, c.query["gracePeriodSeconds"]) for c in delete] == [
        (f"/api/v1/namespaces/{NS}/pods/c-000000000005", "0")
    ]
    assert cluster.pod("c-000000000005") is None


async def test_not_ready_in_time_raises(cluster: FakeCluster, make_backend: BackendFactory) -> None:
    cluster.auto_ready = False
    backend = await make_backend(start_timeout=0.2)
    with pytest.raises(BackendError, match="not ready within"):
        await backend.create(action_spec("c-000000000006"))
    assert cluster.pod("c-000000000006") is None


async def test_remove_deletes_with_grace_waits_and_is_idempotent(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    handle = await backend.create(action_spec("c-000000000007"))
    await backend.remove(handle, 2.5)
    delete = next(c for c in cluster.calls if c.method == "DELETE")
    assert delete.query["gracePeriodSeconds"] == "3"
    assert cluster.pod("c-000000000007") is None
    assert await backend.status(handle) is Status.GONE
    await backend.remove(handle, 1.0)  # gone: returns at once
    assert [c.status for c in cluster.calls if c.method == "DELETE"] == [200, 404]


async def test_watch_410_gone_relists_and_notices_missed_deletion(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    handle = await backend.create(action_spec("c-000000000008"))
    assert await backend.status(handle) is Status.RUNNING
    # The pod disappears while history is compacted: no DELETED event will ever arrive.
    del cluster.objects[("pods", NS, "c-000000000008")]
    await cluster.compact()
    await backend.watch.wait_for("c-000000000008", lambda p: p is None, 5.0)
    assert backend.watch.relists == 2
    assert await backend.status(handle) is Status.GONE
    watches = [c for c in cluster.calls if c.query.get("watch") == "true"]
    assert any(
        c.query.get("resourceVersion") and int(c.query["resourceVersion"]) < cluster.compacted
        for c in watches
    )  # the resumed watch that got 410
    # the watch keeps working after the re-list
    second = await backend.create(action_spec("c-000000000009"))
    assert await backend.status(second) is Status.RUNNING


async def test_watch_resumes_after_the_server_ends_it(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    await cluster.end_watches()
    handle = await backend.create(action_spec("c-000000000010"))
    assert await backend.status(handle) is Status.RUNNING
    assert backend.watch.relists == 1  # resumed from its version, no re-list


async def test_restart_recovers_pods_from_labels(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    first = await make_backend()
    made = await first.create(action_spec("c-000000000011"))
    stem = await first.create(
        ContainerSpec(
            "c-000000000012", "python:3.11", 256, None, {"role": "stem", "kind": "python:3.11"}
        )
    )
    # a pod of ours that never became ready (a create interrupted by the restart)
    body, _ = render_pod(action_spec("c-000000000013"), first.options, first.owner)
    body["status"] = {"phase": "Pending"}
    cluster._store("pods", NS, body)
    await first.close()

    restarted = await make_backend()
    found = {h.id: h for h in await restarted.list()}
    assert set(found) == {"c-000000000011", "c-000000000012"}
    assert found["c-000000000011"].labels == made.labels
    assert found["c-000000000011"].url == made.url
    assert found["c-000000000012"].labels == stem.labels
    assert cluster.pod("c-000000000013") is None  # stale one removed


async def test_relabel_patches_labels_and_annotation(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    stem = await backend.create(
        ContainerSpec("c-000000000014", "python:3.11", 256, None, {"role": "stem", "kind": "py"})
    )
    new_labels = action_spec("c-000000000014").labels
    handle = await backend.relabel(stem, new_labels)
    assert handle.labels == new_labels
    patch = next(c for c in cluster.calls if c.method == "PATCH")
    assert patch.path == f"/api/v1/namespaces/{NS}/pods/c-000000000014"
    assert patch.body["metadata"]["labels"]["apf-gateway.dev/role"] == "action"
    meta = cluster.pod("c-000000000014")["metadata"]  # type: ignore[index]
    assert meta["labels"]["apf-gateway.dev/action"] == "hello"
    await backend.remove(handle, 1)
    with pytest.raises(ContainerGone):
        await backend.relabel(handle, new_labels)


async def test_pause_and_resume_are_noops_and_agent_is_empty(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    handle = await backend.create(action_spec("c-000000000015"))
    await backend.pause(handle)
    assert await backend.status(handle) is Status.RUNNING
    await backend.resume(handle)
    assert backend.agent(handle) == {}
    before = len(cluster.calls)
    await backend.pause(handle)
    assert len(cluster.calls) == before  # no API call at all
    await backend.remove(handle, 1)
    with pytest.raises(ContainerGone):
        await backend.pause(handle)


async def test_eviction_honours_the_pdb_and_never_forces(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    never = await backend.create(action_spec("c-000000000016", EvictionSafe.NEVER))
    always = await backend.create(action_spec("c-000000000017", EvictionSafe.ALWAYS))
    assert await backend.evict(never, grace=2.5) is False  # the PDB: one call, no retry here
    (eviction,) = [c for c in cluster.calls if c.path.endswith("/eviction")]
    assert (eviction.method, eviction.status) == ("POST", 429)
    assert eviction.path == f"/api/v1/namespaces/{NS}/pods/c-000000000016/eviction"
    assert eviction.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "c-000000000016", "namespace": NS},
        "deleteOptions": {"kind": "DeleteOptions", "gracePeriodSeconds": 3},
    }
    assert cluster.pod("c-000000000016") is not None
    assert not [c for c in cluster.calls if c.method == "DELETE"]  # never forced

    assert await backend.evict(always, grace=1) is True
    assert cluster.pod("c-000000000017") is None
    assert await backend.evict(always, grace=1) is True  # gone: nothing to refuse


async def test_registry_loads_the_backend_lazily(api_url: str) -> None:
    backend = load_backend("kubernetes", server=api_url, namespace=NS)
    try:
        assert backend.name == "kubernetes"
        assert await backend.list() == []
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("safe", "annotation", "label"),
    [
        (EvictionSafe.NEVER, "false", "false"),
        (EvictionSafe.ON_UPGRADE, "false", "true"),
        (EvictionSafe.ALWAYS, "true", "true"),
    ],
)
async def test_the_action_spec_fields_shape_the_pod(
    cluster: FakeCluster,
    make_backend: BackendFactory,
    safe: EvictionSafe,
    annotation: str,
    label: str,
) -> None:
    """Image, memory, grace, policy, the action's pod template and the router reach the pod
    (validated against the Kubernetes schemas by the fixture)."""
    backend = await make_backend(
        pod_template={"metadata": {"labels": {"team": "ops"}}, "spec": {"priorityClassName": "x"}},
        # as --backend-option gives it: the operator lets actions choose nodes and priority
        allowed_pod_template_fields="spec.nodeSelector,spec.priorityClassName",
    )
    base = action_spec("c-000000000018", safe)
    template = {
        "metadata": {"labels": {"tier": "batch"}, "annotations": {"note": "mine"}},
        "spec": {"nodeSelector": {"pool": "actions"}, "priorityClassName": "actions"},
    }
    spec = ContainerSpec(
        base.id,
        base.kind,
        1024,
        1,
        base.labels,
        image="openwhisk/action-python-v3.12",
        grace_seconds=600,
        eviction=safe,
        pod_template=template,
        router="router-7",
    )
    await backend.create(spec)
    pod = cluster.pod("c-000000000018")
    assert pod is not None
    meta = pod["metadata"]
    assert meta["labels"][SAFE_LABEL] == label
    assert meta["annotations"][CA_ANNOTATION] == annotation
    assert meta["annotations"]["apf-gateway.dev/eviction-safe"] == safe.value
    assert meta["labels"]["apf-gateway.dev/router"] == "router-7"
    assert meta["labels"]["team"] == "ops" and meta["labels"]["tier"] == "batch"
    assert meta["annotations"]["note"] == "mine"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 600
    assert pod["spec"]["nodeSelector"] == {"pool": "actions"}
    assert pod["spec"]["priorityClassName"] == "actions"  # the action's over the operator's
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "openwhisk/action-python-v3.12"
    assert "command" not in container
    assert container["resources"] == {
        "requests": {"cpu": "1000m", "memory": "1024Mi"},
        "limits": {"cpu": "1000m", "memory": "1024Mi"},
    }


async def test_a_stem_cell_is_always_evictable_until_bound(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend()
    stem = await backend.create(
        ContainerSpec("c-000000000019", "python:3.11", 256, None, {"role": "stem"})
    )
    assert cluster.pod("c-000000000019")["metadata"]["labels"][SAFE_LABEL] == "true"  # type: ignore[index]
    await backend.relabel(stem, action_spec("c-000000000019", EvictionSafe.NEVER).labels)
    meta = cluster.pod("c-000000000019")["metadata"]  # type: ignore[index]
    assert meta["labels"][SAFE_LABEL] == "false"  # now protected by the PDB
    assert meta["annotations"][CA_ANNOTATION] == "false"
    assert await backend.evict(stem, grace=1) is False


async def test_a_stored_hostile_template_never_reaches_the_pod(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    """Defence in depth (issue 21): an action document stored before the PUT check (or with a
    router allowing more) is filtered again where the pod is rendered, on create and on the
    relabel that binds a stem cell; each dropped field is named in a warning."""
    backend = await make_backend(allowed_pod_template_fields="spec.tolerations")
    base = action_spec("c-000000000022")
    template = {
        "metadata": {
            "labels": {"app.kubernetes.io/name": "apf-gateway-frontdoor", "team": "pay"},
            "annotations": {"container.apparmor.security.beta.kubernetes.io/runtime": "unconfined"},
        },
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "hostNetwork": True,
        },
    }
    spec = ContainerSpec(base.id, base.kind, 256, 1, base.labels, pod_template=template)
    await backend.create(spec)
    pod = cluster.pod("c-000000000022")
    assert pod is not None
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert "app.kubernetes.io/name" not in labels and labels["team"] == "pay"
    assert not [a for a in annotations if "apparmor" in a]
    assert "priorityClassName" not in pod["spec"] and "hostNetwork" not in pod["spec"]
    assert pod["spec"]["tolerations"] == [{"operator": "Exists"}]  # the operator allowed it
    for field in ("metadata.labels.app.kubernetes.io/name", "spec.priorityClassName",
                  "spec.hostNetwork", "metadata.annotations.container.apparmor"):  # fmt: skip
        assert any(f"podTemplate.{field}" in w for w in backend.warnings), (field, backend.warnings)
    # a stem cell bound to such an action: its eviction metadata ignores the tenant's claims
    stem = await backend.create(
        ContainerSpec("c-000000000023", "python:3.11", 256, None, {"role": "stem"})
    )
    action = json.loads(base.labels["action"])
    action["podTemplate"] = {"metadata": {"labels": {SAFE_LABEL: "true"}}}
    await backend.relabel(stem, {**base.labels, "action": json.dumps(action)})
    bound = cluster.pod("c-000000000023")
    assert bound is not None and bound["metadata"]["labels"][SAFE_LABEL] == "false"  # Never


async def test_operators_can_ignore_action_pod_templates(
    cluster: FakeCluster, make_backend: BackendFactory
) -> None:
    backend = await make_backend(action_pod_templates="false")  # as --backend-option gives it
    base = action_spec("c-000000000020")
    template = {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}
    spec = ContainerSpec(base.id, base.kind, 256, 1, base.labels, pod_template=template)
    await backend.create(spec)
    pod = cluster.pod("c-000000000020")
    assert pod is not None and "tolerations" not in pod["spec"]
    assert any("podTemplate is ignored" in w for w in backend.warnings)
