"""The Kubernetes backend's settings: keyword arguments (``apf-gateway manager serve
--backend-option NAME=VALUE`` passes them as text), else ``APF_K8S_*`` environment variables
(the Deployment in ``deploy/`` sets these, partly from the downward API), else defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from gateway.platform.podtemplate import parse_allowed

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_IMAGE = "ghcr.io/apf-gateway/apf-gateway:0.1.0"


@dataclass(frozen=True, slots=True)
class K8sOptions:
    namespace: str = "default"  # where action pods, the PDB and the Lease live
    instance: str = "apf-gateway"  # the manager's name: pods are selected by it
    image: str = DEFAULT_IMAGE  # our runtime image (the same image as every component)
    images: dict[str, str] = field(default_factory=dict)  # kind -> OpenWhisk runtime image
    runtime_port: int = 8080
    health_path: str | None = None  # HTTP readiness path of our runtime; None: TCP probe
    owner_deployment: str | None = None  # the manager Deployment (ownerReferences)
    owner_uid: str | None = None  # its uid; looked up by name when not given
    pod_template: dict[str, Any] = field(default_factory=dict)
    # honour actions' own podTemplate (their labels and annotations, and the fields allowed
    # below); false: ignore them (with a warning), only the operator's applies
    action_pod_templates: bool = True
    # the pod template fields actions may set (gateway.platform.podtemplate); the rest of an
    # action's template is dropped with a warning: the routers' --allow-pod-template-field
    # refuses it at PUT, this catches documents stored before or a check bypassed
    allowed_pod_template_fields: frozenset[str] = frozenset()
    termination_grace_seconds: int = 30
    cpu_per_gib: float = 1.0  # CPU (cores) requested per GiB of limits.memory
    start_timeout: float = 120.0
    server: str | None = None  # API server URL (tests); None: in-cluster or kubeconfig

    @classmethod
    def from_env(cls, env: Mapping[str, str], **given: Any) -> K8sOptions:
        """``given`` wins over the environment, which wins over defaults. A ``str`` given for
        a field of another type is parsed like the environment variable would be."""
        names = {f.name for f in fields(cls)}
        unknown = set(given) - names
        if unknown:
            raise ValueError(
                f"unknown kubernetes backend options: {sorted(unknown)} (known: {sorted(names)})"
            )
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get("APF_K8S_" + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw)
        for name, value in given.items():
            if isinstance(value, str) and name in _TYPED:
                values[name] = _parse(name, value, f"--backend-option {name}")
            elif value is not None:
                values[name] = value
        if "namespace" not in values and SERVICE_ACCOUNT_NAMESPACE.exists():
            values["namespace"] = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        return cls(**values)

    @classmethod
    def from_os(cls, **given: Any) -> K8sOptions:
        return cls.from_env(os.environ, **given)

    def image_for(self, kind: str) -> tuple[str, bool]:
        """``(image, ours)``: the OpenWhisk image named for the kind, else our runtime."""
        image = self.images.get(kind)
        return (image, False) if image else (self.image, True)


_TYPED = {
    "action_pod_templates",
    "allowed_pod_template_fields",
    "images",
    "pod_template",
    "runtime_port",
    "termination_grace_seconds",
    "cpu_per_gib",
    "start_timeout",
}


def _parse(name: str, raw: str, source: str = "") -> Any:
    try:
        if name == "images":
            pairs = [p.strip() for p in raw.split(",") if p.strip()]
            out = {}
            for pair in pairs:
                kind, sep, image = pair.partition("=")
                if not sep or not kind or not image:
                    raise ValueError(f"expected KIND=IMAGE, got {pair!r}")
                out[kind] = image
            return out
        if name == "pod_template":
            doc = yaml.safe_load(Path(raw).read_text())
            if not isinstance(doc, dict):
                raise ValueError("the pod template file must hold a mapping")
            return doc
        if name == "allowed_pod_template_fields":
            return parse_allowed([raw])
        if name == "action_pod_templates":
            if raw.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return raw.lower() == "true"
        if name in ("runtime_port", "termination_grace_seconds"):
            return int(raw)
        if name in ("cpu_per_gib", "start_timeout"):
            return float(raw)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{source or 'APF_K8S_' + name.upper()}={raw!r}: {exc}") from exc
    return raw
