"""Issue 21: a tenant pod can never be selected as a platform pod. Every selector the shipped
manifests hold (NetworkPolicies, Services, Deployments, PodDisruptionBudgets, affinities) is
evaluated against a Pod rendered by the real renderer from a hostile action template that
claims every label the platform's pods carry or the manifests select on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml
from test_deploy import KUSTOMIZATIONS, find, pod_spec, rendered

from gateway.manager.backends.base import ContainerSpec
from gateway.manager.backends.k8s import podspec
from gateway.manager.backends.k8s.options import K8sOptions
from gateway.manager.backends.k8s.podspec import render_pod
from gateway.platform.actions import EvictionSafe
from gateway.platform.podtemplate import ALLOWABLE_SPEC, is_platform_key, parse_allowed

Obj = dict[str, Any]
# Selectors meant to select action pods: the actions' NetworkPolicy (only routers reach them)
# and the PodDisruptionBudget that protects eviction.safe Never pods.
FOR_ACTIONS = {
    ("NetworkPolicy", "apf-gateway-actions", "spec.podSelector"),
    ("PodDisruptionBudget", "apf-gateway-safe-to-evict-false", "spec.selector"),
}
# The operator allowed every field that can be allowed: still no platform label.
EVERYTHING = parse_allowed(f"spec.{name}" for name in ALLOWABLE_SPEC)


def selectors(obj: Obj) -> Iterator[tuple[str, Obj]]:
    """``(path, LabelSelector)`` for every pod selector in ``obj`` (a Service's plain map as
    ``matchLabels``); namespace selectors select namespaces, not pods."""

    def walk(node: Any, path: str) -> Iterator[tuple[str, Obj]]:
        if isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, f"{path}[{i}]")
        elif isinstance(node, dict):
            for key, value in node.items():
                where = f"{path}.{key}" if path else key
                if key == "selector" and obj["kind"] == "Service":
                    yield where, {"matchLabels": value}
                elif key in ("podSelector", "labelSelector", "selector"):
                    yield where, value
                elif key != "namespaceSelector":
                    yield from walk(value, where)

    if obj["kind"] == "ServiceMonitor":  # selects Services, not pods
        return
    yield from walk(obj.get("spec", {}), "spec")


def matches(selector: Obj, labels: dict[str, str]) -> bool:
    """Kubernetes' LabelSelector semantics (an empty selector selects every pod)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def hostile_labels(objects: list[Obj]) -> dict[str, str]:
    """Every label of every platform pod, and every label any selector asks for."""
    labels: dict[str, str] = {}
    for obj in objects:
        if obj["kind"] == "Deployment":
            labels.update(obj["spec"]["template"]["metadata"]["labels"])
        for _, sel in selectors(obj):
            labels.update(sel.get("matchLabels") or {})
            for expr in sel.get("matchExpressions") or []:
                if expr.get("values"):
                    labels[expr["key"]] = expr["values"][0]
    labels["app.kubernetes.io/name"] = "apf-gateway-frontdoor"  # the label
    labels["apf-gateway.dev/scrape"] = "true"
    return labels


def hostile_pod(objects: list[Obj]) -> Obj:
    labels = hostile_labels(objects)
    template = {
        "metadata": {"labels": labels, "annotations": dict(labels)},
        "spec": {"priorityClassName": "system-node-critical"},
    }
    action = {"namespace": "mallory", "name": "door", "eviction": "Never"}
    spec = ContainerSpec(
        "c-000000000666",
        "python:3",
        256,
        1,
        {"role": "action", "kind": "python:3", "action": json.dumps(action)},
        eviction=EvictionSafe.NEVER,
        pod_template=template,
        router="router-1",
    )
    options = K8sOptions(namespace="apf-gateway", allowed_pod_template_fields=EVERYTHING)
    pod, _ = render_pod(spec, options, None)
    return pod


def selected_by(objects: list[Obj], pod: Obj) -> list[tuple[str, str, str]]:
    labels = pod["metadata"]["labels"]
    return [
        (obj["kind"], obj["metadata"]["name"], path)
        for obj in objects
        for path, sel in selectors(obj)
        if matches(sel, labels)
    ]


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_no_platform_selector_selects_a_hostile_tenant_pod(name: str) -> None:
    objects = rendered(name)
    pod = hostile_pod(objects)
    found = selected_by(objects, pod)
    assert set(found) == FOR_ACTIONS, found  # the actions' own selectors do, nothing else
    assert not [k for k in pod["metadata"]["labels"] if k.startswith("app.kubernetes.io/")
                and k != podspec.MANAGED_BY]  # fmt: skip


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_network_policies_hold_even_if_the_renderer_let_every_label_through(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: with the renderer's filter bypassed, the pod carries the front
    door's labels, yet no NetworkPolicy takes it for a platform pod (the manager's
    ``managed-by`` label, which it always sets, is excluded by each). Services cannot say
    ``DoesNotExist``: for them the filter is the guard (the test above)."""
    objects = rendered(name)
    monkeypatch.setattr(podspec, "review", lambda template, allowed: (template, []))
    pod = hostile_pod(objects)
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "apf-gateway-frontdoor"
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert set(selected_by(policies, pod)) == {k for k in FOR_ACTIONS if k[0] == "NetworkPolicy"}


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_manifests_select_only_on_keys_tenants_cannot_set(name: str) -> None:
    for obj in rendered(name):
        for path, sel in selectors(obj):
            keys = [
                *(sel.get("matchLabels") or {}),
                *(e["key"] for e in sel.get("matchExpressions") or []),
            ]
            where = f"{obj['kind']} {obj['metadata']['name']} {path}"
            assert keys, f"{where}: an empty selector selects every pod, tenants' too"
            assert all(is_platform_key(k) for k in keys), (where, keys)


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_front_door_authenticates_to_the_routers(name: str) -> None:
    """No router trusts a network; the front door reads the internal token from the Secret
    the manager and routers use, at the path its configuration names."""
    objects = rendered(name)
    router = pod_spec(find(objects, "Deployment", "apf-gateway-router"))
    assert not [a for c in router["containers"] for a in c["args"] if "trusted-network" in a]
    front = pod_spec(find(objects, "Deployment", "apf-gateway-frontdoor"))
    (volume,) = [v for v in front["volumes"] if v.get("secret", {}).get("secretName")
                 == "apf-gateway-internal"]  # fmt: skip
    assert volume["secret"]["defaultMode"] & 0o007 == 0  # not world-readable: the reader refuses
    assert front["securityContext"]["fsGroup"] == front["securityContext"]["runAsGroup"]
    (mount,) = [m for c in front["containers"] for m in c["volumeMounts"]
                if m["name"] == volume["name"]]  # fmt: skip
    config = find(objects, "ConfigMap", "apf-gateway-frontdoor")["data"]["gateway.yaml"]
    (upstream,) = yaml.safe_load(config)["upstreams"]
    token = PurePosixPath(upstream["bearerTokenFile"])
    assert str(token.parent) == mount["mountPath"]
    (item,) = volume["secret"]["items"]
    assert item == {"key": "token", "path": token.name}
