"""deploy/: every manifest renders (kustomize_lite) and validates against the Kubernetes
schemas; RBAC grants exactly what the manager calls; probes, drains and hot reload line up."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import validate
from kustomize_lite import load_yaml, render

from gateway.manager.backends.k8s.calls import rbac_triples
from gateway.manager.backends.k8s.eviction import pdb_body
from gateway.manager.backends.k8s.options import DEFAULT_IMAGE
from gateway.settings.load import parse_duration
from gateway.settings.sources import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUSTOMIZATIONS = ["base", "overlays/production", "overlays/dev"]
CRDS = {"ServiceMonitor"}  # not in the core schemas: checked by shape below

Obj = dict[str, Any]


def rendered(name: str) -> list[Obj]:
    return render(DEPLOY / "kubernetes" / name)


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_rendered_manifest_validates(name: str) -> None:
    objects = rendered(name)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service",
            "HorizontalPodAutoscaler", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy",
            "ServiceMonitor"} <= kinds  # fmt: skip
    for obj in objects:
        if obj["kind"] in CRDS:
            spec = obj["spec"]
            assert spec["selector"]["matchLabels"]
            assert all(e["port"] and e["path"] == "/metrics" for e in spec["endpoints"])
            continue
        validate(obj)
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "apf-gateway"


def test_the_sidecar_example_validates_and_is_a_native_sidecar() -> None:
    objects = load_yaml(DEPLOY / "kubernetes" / "examples" / "sidecar.yaml")
    for obj in objects:
        validate(obj)
    spec = pod_spec(find(objects, "Deployment", "httpbin"))
    (sidecar,) = spec["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/livez"
    (app,) = spec["containers"]
    assert {"name": "HOST", "value": "127.0.0.1"} in app["env"]  # reachable only via the sidecar
    config = yaml.safe_load(find(objects, "ConfigMap", "httpbin-apf")["data"]["gateway.yaml"])
    assert config["upstreams"] == [{"url": "http://127.0.0.1:9000"}]
    service = find(objects, "Service", "httpbin")
    assert service["spec"]["ports"][0]["targetPort"] == sidecar["ports"][0]["containerPort"]


def test_rbac_grants_exactly_the_calls_the_manager_makes() -> None:
    objects = rendered("base")
    role = find(objects, "Role", "apf-gateway-manager")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == rbac_triples()
    assert not any("*" in str(rule) for rule in role["rules"])
    binding = find(objects, "RoleBinding", "apf-gateway-manager")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "apf-gateway-manager", "namespace": "apf-gateway"}
    ]
    manager = pod_spec(find(objects, "Deployment", "apf-gateway-manager"))
    assert manager["serviceAccountName"] == "apf-gateway-manager"
    for name in ("apf-gateway-frontdoor", "apf-gateway-router"):
        spec = pod_spec(find(objects, "Deployment", name))
        assert spec["automountServiceAccountToken"] is False  # no API access at all


def test_the_never_pdb_is_the_one_the_manager_would_create() -> None:
    objects = rendered("base")
    pdb = find(objects, "PodDisruptionBudget", "apf-gateway-safe-to-evict-false")
    assert pdb["spec"] == pdb_body("apf-gateway", {})["spec"]


def test_config_maps_hold_loadable_configuration_and_are_mounted_for_reload(
    tmp_path: Path,
) -> None:
    objects = rendered("base")
    flow = find(objects, "ConfigMap", "apf-gateway-flowcontrol")
    root = DEPLOY.parent / "config" / "flowcontrol"
    assert flow["data"] == {p.name: p.read_text() for p in sorted(root.glob("*.yaml"))}
    gateway = find(objects, "ConfigMap", "apf-gateway-frontdoor")
    for folder, cm in (("gateway", gateway), ("flowcontrol", flow)):
        (tmp_path / folder).mkdir()
        for key, text in cm["data"].items():
            (tmp_path / folder / key).write_text(text)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "openwhisk-keys").write_text("")
    overrides = {"authentication": {"openwhiskKeysFile": str(keys / "openwhisk-keys")}}
    loaded = load_config([tmp_path / "gateway", tmp_path / "flowcontrol"], overrides)
    assert loaded.settings.listen == "0.0.0.0:8080"
    assert loaded.flow is not None
    frontdoor = pod_spec(find(objects, "Deployment", "apf-gateway-frontdoor"))
    (container,) = frontdoor["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert all("subPath" not in m for m in mounts.values())  # subPath mounts never update
    args = container["args"]
    assert mounts["gateway"]["mountPath"] in args and mounts["flowcontrol"]["mountPath"] in args


def test_probes_and_drain_timing_are_consistent() -> None:
    objects = rendered("base")
    gateway = yaml.safe_load(
        find(objects, "ConfigMap", "apf-gateway-frontdoor")["data"]["gateway.yaml"]
    )
    frontdoor = pod_spec(find(objects, "Deployment", "apf-gateway-frontdoor"))
    (c,) = frontdoor["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = parse_duration(gateway["shutdownGracePeriod"])
    assert frontdoor["terminationGracePeriodSeconds"] >= pre_stop + drain + 5
    router = pod_spec(find(objects, "Deployment", "apf-gateway-router"))
    (r,) = router["containers"]
    assert r["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert r["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    pre_stop = int(r["lifecycle"]["preStop"]["exec"]["command"][1])
    assert router["terminationGracePeriodSeconds"] >= pre_stop + 30  # aiohttp's shutdown
    manager = find(objects, "Deployment", "apf-gateway-manager")
    assert manager["spec"]["replicas"] == 2
    (m,) = pod_spec(manager)["containers"]
    command = m["command"]
    lease = float(command[command.index("--lease-duration") + 1])
    assert pod_spec(manager)["terminationGracePeriodSeconds"] >= lease  # stop, then release
    assert "--keep-containers" in command
    listen = command[command.index("--listen") + 1]
    ready = command[command.index("--ready-url") + 1]
    assert ready == f"http://127.0.0.1:{listen.rpartition(':')[2]}/readyz"
    assert m["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_manager_starts_action_pods_from_its_own_image(name: str) -> None:
    (m,) = pod_spec(find(rendered(name), "Deployment", "apf-gateway-manager"))["containers"]
    env = {e["name"]: e.get("value") for e in m["env"]}
    assert env["APF_K8S_IMAGE"] == m["image"]
    if name == "base":
        assert m["image"] == DEFAULT_IMAGE


def test_dockerfile_is_multi_stage_non_root_exec_form() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) == 2
    assert re.search(r"^FROM python:\$\{PYTHON\}-slim AS build$", text, re.M)
    (user,) = re.findall(r"^USER (\S+)$", text, re.M)
    assert not user.startswith(("0", "root"))
    entry = re.search(r"^ENTRYPOINT (.+)$", text, re.M)
    assert entry is not None and yaml.safe_load(entry.group(1)) == ["apf-gateway"]
    cmd = re.search(r"^CMD (.+)$", text, re.M)
    assert cmd is not None and isinstance(yaml.safe_load(cmd.group(1)), list)


def test_every_component_is_scraped() -> None:
    objects = rendered("base")
    monitored = {
        o["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        for o in objects
        if o["kind"] == "ServiceMonitor"
    }
    for name in ("apf-gateway-frontdoor", "apf-gateway-router", "apf-gateway-manager"):
        (service,) = [  # what the ServiceMonitor selects: Services by label
            o
            for o in objects
            if o["kind"] == "Service" and o["metadata"]["labels"]["app.kubernetes.io/name"] == name
        ]
        assert name in monitored and service["spec"]["selector"]["app.kubernetes.io/name"] == name
        assert any(p["name"] == "http" for p in service["spec"]["ports"])
        template = find(objects, "Deployment", name)["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
