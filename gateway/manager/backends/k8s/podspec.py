"""A container spec rendered as a Pod body (a plain dict, validated in tests against the
Kubernetes schemas).

From the spec's typed fields: image (the action's, else the kind's OpenWhisk image, else ours),
memory (requests = limits), ``terminationGracePeriodSeconds`` (the action's, else the
backend's default), the eviction policy (labels/annotations, ``eviction.py``), the pod
template (the operator's, with what the action may set of its own merged over it:
``tenant_template``) and the router label. A spec not
bound to an action (a stem cell: it holds no work) is rendered ``Always``; binding it
(``relabel``) gives it the action's policy.

Isolation (our runtime image): non-root, no privilege escalation, every capability dropped,
the default seccomp profile, a read-only root filesystem with an ``emptyDir`` ``/tmp`` (sized
like the memory limit), no service-account token, no service links; the container's secret in
``APF_CONTAINER_SECRET`` (the runtime takes it out of its environment at start). Only routers
may connect (``deploy/kubernetes/base/networkpolicy.yaml``).

The manager's opaque labels (``role``, ``kind``, ``memory``, ``action`` as JSON) are not valid
Kubernetes label values, so they travel in the annotation ``apf-gateway.dev/labels``; the Pod's
Kubernetes labels are derived from them and sanitised (action, namespace, role, router).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gateway.manager.backends.base import ContainerSpec
from gateway.manager.backends.k8s.eviction import (
    CA_ANNOTATION,
    POLICY_ANNOTATION,
    SAFE_LABEL,
    apply_eviction,
)
from gateway.manager.backends.k8s.options import K8sOptions
from gateway.platform.actions import EvictionSafe
from gateway.platform.podtemplate import review

DOMAIN = "apf-gateway.dev"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "apf-gateway-manager"
INSTANCE_LABEL = f"{DOMAIN}/manager"
CONTAINER_LABEL = f"{DOMAIN}/container"
LABELS_ANNOTATION = f"{DOMAIN}/labels"
CONTAINER_NAME = "runtime"
OPENWHISK_PORT = 8080  # the action-proxy protocol fixes it for OpenWhisk images
SECRET_ENV = "APF_CONTAINER_SECRET"  # gateway.runtime.__main__ reads (and removes) it
TMP_VOLUME = "tmp"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Owner:
    name: str
    uid: str


def label_value(text: str) -> str:
    """A valid label value that still reads like ``text`` (hash-suffixed when changed)."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:52].strip("-_.")
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{cleaned}-{digest}" if cleaned else digest


def selector(options: K8sOptions) -> dict[str, str]:
    """The labels every pod of this manager has (list/watch select on them)."""
    return {MANAGED_BY: MANAGED_BY_VALUE, INSTANCE_LABEL: label_value(options.instance)}


def derived_labels(labels: dict[str, str]) -> dict[str, str]:
    """Kubernetes labels from the manager's opaque labels."""
    out = {f"{DOMAIN}/role": label_value(labels.get("role", "action"))}
    if "kind" in labels:
        out[f"{DOMAIN}/kind"] = label_value(labels["kind"])
    if "router" in labels:
        out[f"{DOMAIN}/router"] = label_value(labels["router"])
    action = _action(labels)
    if action:
        out[f"{DOMAIN}/action-namespace"] = label_value(str(action.get("namespace", "")))
        out[f"{DOMAIN}/action"] = label_value(str(action.get("name", "")))
    return out


def _action(labels: dict[str, str]) -> dict[str, Any]:
    try:
        value = json.loads(labels.get("action", "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _quantity_cpu(cores: float) -> str:
    return f"{max(10, math.ceil(cores * 1000))}m"


def merge_templates(operator: dict[str, Any], action: dict[str, Any] | None) -> dict[str, Any]:
    """The operator's pod template with the action's over it (labels/annotations merged)."""
    merged = copy.deepcopy(operator)
    if not action:
        return merged
    meta = merged.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        extra = (action.get("metadata") or {}).get(key)
        if extra:
            meta[key] = {**(meta.get(key) or {}), **extra}
    spec = merged.setdefault("spec", {})
    spec.update(copy.deepcopy(action.get("spec") or {}))
    return merged


def tenant_template(
    template: dict[str, Any] | None, options: K8sOptions
) -> tuple[dict[str, Any] | None, list[str]]:
    """What of an action's pod template the pod gets: the rule of the action API
    (``gateway.platform.podtemplate``) once more, for documents stored before it or a check
    bypassed: no platform label, no field the operator did not allow."""
    if template is None or not options.action_pod_templates:
        return None, []
    clean, refused = review(template, options.allowed_pod_template_fields)
    return clean or None, refused


def _safe(spec: ContainerSpec) -> EvictionSafe:
    if spec.eviction is not None:
        return spec.eviction
    action = _action(spec.labels)
    return EvictionSafe(action["eviction"]) if action.get("eviction") else EvictionSafe.ALWAYS


def relabel_eviction(
    labels: dict[str, str], options: K8sOptions
) -> tuple[dict[str, str], dict[str, str]]:
    """The eviction label and annotations for a pod (re)bound to the action in ``labels``."""
    action = _action(labels)
    safe = EvictionSafe(action.get("eviction") or EvictionSafe.ALWAYS.value)
    own, _ = tenant_template(action.get("podTemplate"), options)
    template = merge_templates(options.pod_template, own)
    meta = template.get("metadata") or {}
    evict = apply_eviction(safe, dict(meta.get("labels") or {}), meta.get("annotations") or {})
    keys = (CA_ANNOTATION, POLICY_ANNOTATION)
    return {SAFE_LABEL: evict.labels[SAFE_LABEL]}, {k: evict.annotations[k] for k in keys}


def render_pod(
    spec: ContainerSpec, options: K8sOptions, owner: Owner | None
) -> tuple[dict[str, Any], list[str]]:
    """``(pod body, warnings)``."""
    ignored = spec.pod_template is not None and not options.action_pod_templates
    action_template, refused = tenant_template(spec.pod_template, options)
    template = merge_templates(options.pod_template, action_template)
    meta = template.get("metadata") or {}
    evict = apply_eviction(
        _safe(spec), dict(meta.get("labels") or {}), meta.get("annotations") or {}
    )
    labels = {**evict.labels, **derived_labels(spec.labels), **selector(options)}
    labels[CONTAINER_LABEL] = spec.id
    if spec.router:
        labels[f"{DOMAIN}/router"] = label_value(spec.router)
    annotations = {**evict.annotations, LABELS_ANNOTATION: json.dumps(spec.labels)}
    image, ours = (spec.image, False) if spec.image else options.image_for(spec.kind)
    grace = options.termination_grace_seconds if spec.grace_seconds is None else spec.grace_seconds
    pod_spec: dict[str, Any] = dict(template.get("spec") or {})
    base: dict[str, Any] = next(
        (c for c in pod_spec.get("containers") or [] if c.get("name") == CONTAINER_NAME), {}
    )
    pod_spec.update(
        {
            "containers": [_container(spec, options, image, ours, base)],
            "restartPolicy": "Never",  # a restarted runtime would have lost its /init
            "terminationGracePeriodSeconds": int(grace),
            "automountServiceAccountToken": False,  # action code gets no API credentials
            "enableServiceLinks": False,
        }
    )
    if ours:  # the read-only root filesystem leaves actions a private, bounded /tmp
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != TMP_VOLUME]
        tmp = {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": f"{spec.memory_mb}Mi"}}
        pod_spec["volumes"] = [*volumes, tmp]
    metadata: dict[str, Any] = {
        "name": spec.id,
        "namespace": options.namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": owner.name,
                "uid": owner.uid,
                "blockOwnerDeletion": False,
                "controller": False,
            }
        ]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    warnings = list(evict.warnings)
    warnings += [f"{spec.id}: dropped from the action's pod template: {p}" for p in refused]
    if ignored:
        warnings.append("the action's podTemplate is ignored (action_pod_templates is false)")
    return body, warnings


def runtime_secret(pod: dict[str, Any]) -> str:
    """The container's secret, from the pod's runtime container (a manager restart)."""
    for container in pod.get("spec", {}).get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            for item in container.get("env") or []:
                if item.get("name") == SECRET_ENV:
                    return str(item.get("value", ""))
    return ""


def runtime_port(pod: dict[str, Any], default: int) -> int:
    """The port the pod's runtime container serves on."""
    for container in pod.get("spec", {}).get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            for port in container.get("ports") or []:
                return int(port["containerPort"])
    return default


def _container(
    spec: ContainerSpec, options: K8sOptions, image: str, ours: bool, base: dict[str, Any]
) -> dict[str, Any]:
    port = options.runtime_port if ours else OPENWHISK_PORT
    memory = f"{spec.memory_mb}Mi"
    cpu = _quantity_cpu(spec.memory_mb / 1024 * options.cpu_per_gib)
    env = [e for e in base.get("env") or [] if e.get("name") not in (*spec.env, SECRET_ENV)]
    env += [{"name": k, "value": v} for k, v in sorted(spec.env.items()) if k != SECRET_ENV]
    container: dict[str, Any] = {
        **base,
        "name": CONTAINER_NAME,
        "image": image,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        # Guaranteed QoS: requests = limits, so node pressure evicts these pods last.
        "resources": {
            "requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu, "memory": memory},
        },
        "readinessProbe": _probe(options, ours),
    }
    if ours:
        argv = ["python", "-m", "gateway.runtime", "--host", "0.0.0.0", "--port", str(port)]
        if spec.concurrency is not None:
            argv += ["--concurrency", str(spec.concurrency)]
        container["command"] = argv
        container["securityContext"] = {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        mounts = [m for m in base.get("volumeMounts") or [] if m.get("name") != TMP_VOLUME]
        container["volumeMounts"] = [*mounts, {"name": TMP_VOLUME, "mountPath": "/tmp"}]
        if spec.secret:
            env.append({"name": SECRET_ENV, "value": spec.secret})
    elif spec.concurrency is not None and spec.concurrency > 1:
        env.append({"name": "__OW_ALLOW_CONCURRENT", "value": "true"})
    if env:
        container["env"] = env
    return container


def _probe(options: K8sOptions, ours: bool) -> dict[str, Any]:
    if ours and options.health_path:
        check: dict[str, Any] = {"httpGet": {"path": options.health_path, "port": "http"}}
    else:
        # Our runtime serves only POST /init and /run; OpenWhisk images likewise.
        check = {"tcpSocket": {"port": "http"}}
    return {**check, "periodSeconds": 1, "failureThreshold": 3, "timeoutSeconds": 1}
