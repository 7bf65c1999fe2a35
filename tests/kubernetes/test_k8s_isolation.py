"""Issue 15 on Kubernetes: the action pod is locked down, carries its container secret (read
back after a manager restart), and only routers reach action pods and the manager."""

from __future__ import annotations

import pytest
from conftest import BackendFactory
from kustomize_lite import render
from test_deploy import DEPLOY, find, pod_spec

from gateway.manager.backends.base import ContainerSpec
from gateway.manager.backends.k8s.options import K8sOptions
from gateway.manager.backends.k8s.podspec import SECRET_ENV, render_pod, runtime_secret

SECRET = "q" * 43


def test_our_runtime_pod_is_locked_down_and_gets_its_secret() -> None:
    template = {
        "spec": {"containers": [{"name": "runtime", "env": [{"name": SECRET_ENV, "value": "x"}]}]}
    }
    options = K8sOptions(namespace="actions", pod_template=template)
    pod, _ = render_pod(ContainerSpec("c-1", "python:3", 512, secret=SECRET), options, None)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # the read-only root leaves a private /tmp, bounded like the memory limit
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "512Mi"}} in spec["volumes"]
    # the secret is the manager's, never one a template (or an action's env) sets
    assert [e for e in container["env"] if e["name"] == SECRET_ENV] == [
        {"name": SECRET_ENV, "value": SECRET}
    ]
    assert runtime_secret(pod) == SECRET


async def test_a_restarted_manager_gets_the_secret_back(make_backend: BackendFactory) -> None:
    first = await make_backend()
    made = await first.create(ContainerSpec("c-000000000021", "python:3", secret=SECRET))
    assert made.secret == SECRET
    await first.close()
    restarted = await make_backend()
    (found,) = [h for h in await restarted.list() if h.id == "c-000000000021"]
    assert found.secret == SECRET


@pytest.mark.parametrize("name", ["base", "overlays/production"])
def test_only_routers_reach_action_pods_and_the_manager(name: str) -> None:
    objects = render(DEPLOY / "kubernetes" / name)
    router = {
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/name": "apf-gateway-router"},
            # never an action pod, whatever its labels (tests/kubernetes/test_selectors.py)
            "matchExpressions": [
                {"key": "app.kubernetes.io/managed-by", "operator": "DoesNotExist"}
            ],
        }
    }
    actions = find(objects, "NetworkPolicy", "apf-gateway-actions")["spec"]
    assert actions["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "apf-gateway-manager"
    }
    assert actions["policyTypes"] == ["Ingress"]
    assert [rule["from"] for rule in actions["ingress"]] == [[router]]
    manager = find(objects, "NetworkPolicy", "apf-gateway-manager")["spec"]
    (rule,) = manager["ingress"]
    assert router in rule["from"] and all(
        "podSelector" not in peer or peer == router for peer in rule["from"]
    )
    # the manager and the routers get the internal token from the same Secret (the front door
    # too, as a file: tests/kubernetes/test_selectors.py)
    for deployment in ("apf-gateway-manager", "apf-gateway-router"):
        (main,) = [
            c
            for c in pod_spec(find(objects, "Deployment", deployment))["containers"]
            if any(e["name"] == "APF_INTERNAL_TOKEN" for e in c.get("env", []))
        ]
        (env,) = [e for e in main["env"] if e["name"] == "APF_INTERNAL_TOKEN"]
        assert env["valueFrom"]["secretKeyRef"] == {"name": "apf-gateway-internal", "key": "token"}
