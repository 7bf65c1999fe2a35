"""The action document: validation of a PUT body, defaults, and the typed view routers use.

Stored documents are plain JSON dicts in OpenWhisk's shape (so the store stays schema-free);
``ActionSpec`` is what the manager knows of an action; ``ActionInfo`` extends it into the frozen,
validated view of one revision routers run (one model: the manager's view is ``info.spec()``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, fields
from typing import Any

from gateway.platform.errors import ApiError, not_implemented
from gateway.platform.ids import is_entity_name
from gateway.platform.podtemplate import review

DEFAULT_LIMITS: dict[str, int] = {
    "timeout": 60000,
    "memory": 256,
    "logs": 10,
    "concurrency": 1,
    "instances": 30,
}
# (min, max) per limit, as OpenWhisk's system limits (concurrency raised by the operator: 500).
LIMIT_RANGES: dict[str, tuple[int, int]] = {
    "timeout": (100, 300000),
    "memory": (128, 2048),
    "logs": (0, 10),
    "concurrency": (1, 500),
    "instances": (1, 10000),
}
SUPPORTED_KIND_PREFIXES = ("python:3",)
MAX_CODE_BYTES = 48 * 1024 * 1024
MAX_GRACE_SECONDS = 3600
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# The kinds a tenant may name: a closed set, since ``kind`` is a label on the router's and
# manager's metrics (a free-form kind would let a tenant mint series without bound).
_KIND = re.compile(r"python:(?:default|3(?:\.[0-9]{1,2})?)")
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$", re.IGNORECASE)


class EvictionSafe(enum.StrEnum):
    """When a container of the action may be disrupted (Agones ``eviction.safe``)."""

    NEVER = "Never"  # run to completion: drained for upgrades only once idle
    ON_UPGRADE = "OnUpgrade"  # may be stopped gracefully for upgrades/drains only
    ALWAYS = "Always"  # may be stopped gracefully for upgrades, space and scale-down


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """What the manager needs to know about an action (no code: routers /init containers)."""

    namespace: str
    name: str
    version: str
    kind: str
    memory_mb: int = 256
    concurrency: int = 1
    timeout_ms: int = 60000
    instances: int = 30
    eviction: EvictionSafe = EvictionSafe.NEVER
    image: str | None = None  # a runtime image speaking the action protocol (Kubernetes)
    grace_seconds: int | None = None  # the action's grace period; None: the manager's default
    pod_template: dict[str, Any] | None = field(default=None, hash=False)

    @property
    def path(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        return f"{self.path}@{self.version}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "memory": self.memory_mb,
            "concurrency": self.concurrency,
            "timeout": self.timeout_ms,
            "instances": self.instances,
            "eviction": self.eviction.value,
        }
        for key, value in (
            ("image", self.image),
            ("terminationGracePeriodSeconds", self.grace_seconds),
            ("podTemplate", self.pod_template),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActionSpec:
        return cls(
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            version=str(data["version"]),
            kind=str(data["kind"]),
            memory_mb=int(data.get("memory", 256)),
            concurrency=int(data.get("concurrency", 1)),
            timeout_ms=int(data.get("timeout", 60000)),
            instances=int(data.get("instances", 30)),
            eviction=EvictionSafe(data.get("eviction", "Never")),
            image=str(data["image"]) if data.get("image") else None,
            grace_seconds=_optional_int(data.get("terminationGracePeriodSeconds")),
            pod_template=data["podTemplate"] if isinstance(data.get("podTemplate"), dict) else None,
        )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionInfo(ActionSpec):
    """One validated revision as routers run it: the manager's ``ActionSpec`` plus what only the
    router needs (code, parameters, log limit, annotations)."""

    code: str
    main: str
    binary: bool
    parameters: dict[str, Any]
    logs_mb: int
    annotations: tuple[tuple[str, Any], ...] = ()

    def spec(self) -> ActionSpec:
        """The manager's view (what travels to it and into its container labels)."""
        return ActionSpec(**{f.name: getattr(self, f.name) for f in fields(ActionSpec)})

    def limits(self) -> dict[str, int]:
        return {
            "timeout": self.timeout_ms,
            "memory": self.memory_mb,
            "logs": self.logs_mb,
            "concurrency": self.concurrency,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> ActionInfo:
        exec_ = doc["exec"]
        limits = {**DEFAULT_LIMITS, **doc.get("limits", {})}
        eviction = doc.get("eviction", {})
        grace = eviction.get("terminationGracePeriodSeconds")
        return cls(
            namespace=doc["namespace"],
            name=doc["name"],
            version=doc.get("version", "0.0.1"),
            kind=exec_["kind"],
            code=exec_.get("code", ""),
            main=exec_.get("main") or "main",
            binary=bool(exec_.get("binary", False)),
            parameters={p["key"]: p.get("value") for p in doc.get("parameters", [])},
            timeout_ms=int(limits["timeout"]),
            memory_mb=int(limits["memory"]),
            logs_mb=int(limits["logs"]),
            concurrency=int(limits["concurrency"]),
            instances=int(limits["instances"]),
            eviction=EvictionSafe(eviction.get("safe", EvictionSafe.NEVER)),
            annotations=tuple((a["key"], a.get("value")) for a in doc.get("annotations", [])),
            image=exec_.get("image") or None,
            grace_seconds=int(grace) if grace is not None else None,
            pod_template=doc.get("podTemplate") or None,
        )


def validate_put(
    namespace: str, name: str, body: Any, *, allowed_template_fields: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Turn a PUT body into a complete action document (version 0.0.1) or raise 400;
    ``allowed_template_fields``: the pod template fields the operator lets tenants set."""
    if not is_entity_name(name):
        raise ApiError(400, f"The name '{name}' is not a valid action name.")
    if not isinstance(body, dict):
        raise ApiError(400, "The request content was malformed: expected a JSON object.")
    exec_ = body.get("exec")
    if not isinstance(exec_, dict):
        raise ApiError(400, "The request content was malformed: 'exec' is required.")
    kind = exec_.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ApiError(400, "The request content was malformed: 'exec.kind' is required.")
    if kind == "sequence":
        raise not_implemented("Sequences")
    if not _KIND.fullmatch(kind):
        shown = kind if len(kind) <= 64 else kind[:64] + "..."
        raise ApiError(
            400,
            f"kind '{shown}' is not supported (supported: python:3, python:3.x, python:default).",
        )
    code = exec_.get("code")
    if not isinstance(code, str) or not code:
        raise ApiError(400, "The request content was malformed: 'exec.code' is required.")
    if len(code) > MAX_CODE_BYTES:
        raise ApiError(413, f"The code exceeds the allowed size of {MAX_CODE_BYTES} bytes.")
    main = exec_.get("main", "main")
    if not isinstance(main, str) or not main.isidentifier():
        raise ApiError(400, "The request content was malformed: 'exec.main' is not a name.")
    limits = dict(DEFAULT_LIMITS)
    given = body.get("limits") or {}
    if not isinstance(given, dict):
        raise ApiError(400, "The request content was malformed: 'limits' must be an object.")
    for key, value in given.items():
        if key not in LIMIT_RANGES:
            raise ApiError(400, f"Unknown limit '{key}'.")
        low, high = LIMIT_RANGES[key]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ApiError(400, f"limits.{key} must be an integer in [{low}, {high}].")
        limits[key] = value
    stored_exec: dict[str, Any] = {"kind": kind, "code": code, "main": main, "binary": False}
    image = exec_.get("image")
    if image is not None:
        if not isinstance(image, str) or not _IMAGE.match(image):
            raise ApiError(400, "exec.image must be a container image reference.")
        stored_exec["image"] = image
    template = _pod_template(body.get("podTemplate"), allowed_template_fields)
    doc: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "version": "0.0.1",
        "publish": bool(body.get("publish", False)),
        "exec": stored_exec,
        "parameters": _key_values(body.get("parameters"), "parameters"),
        "annotations": _key_values(body.get("annotations"), "annotations"),
        "limits": limits,
        "eviction": _eviction(body.get("eviction"), template),
    }
    if template:
        doc["podTemplate"] = template
    return doc


def _eviction(value: Any, template: dict[str, Any] | None) -> dict[str, Any]:
    eviction = value or {}
    if not isinstance(eviction, dict):
        raise ApiError(400, "The request content was malformed: 'eviction' must be an object.")
    unknown = set(eviction) - {"safe", "terminationGracePeriodSeconds"}
    if unknown:
        raise ApiError(400, f"Unknown eviction field(s): {', '.join(sorted(unknown))}.")
    try:
        safe = EvictionSafe(str(eviction.get("safe", "Never")))
    except ValueError:
        allowed = ", ".join(e.value for e in EvictionSafe)
        raise ApiError(400, f"eviction.safe must be one of {allowed}.") from None
    annotations = ((template or {}).get("metadata") or {}).get("annotations") or {}
    if annotations.get(SAFE_TO_EVICT_ANNOTATION) == "true":
        safe = EvictionSafe.ALWAYS  # Agones: a template that says safe-to-evict means Always
    out: dict[str, Any] = {"safe": safe.value}
    grace = eviction.get("terminationGracePeriodSeconds")
    if grace is not None:
        if (
            not isinstance(grace, int)
            or isinstance(grace, bool)
            or not 0 <= grace <= MAX_GRACE_SECONDS
        ):
            raise ApiError(
                400,
                "eviction.terminationGracePeriodSeconds must be an integer in "
                f"[0, {MAX_GRACE_SECONDS}].",
            )
        out["terminationGracePeriodSeconds"] = grace
    return out


def _pod_template(value: Any, allowed: frozenset[str]) -> dict[str, Any] | None:
    """What a tenant may set of a pod (``gateway.platform.podtemplate``); 400 names the rest."""
    if value is None:
        return None
    clean, problems = review(value, allowed)
    if problems:
        raise ApiError(400, "; ".join(problems) + ".")
    return clean or None


def _key_values(value: Any, field: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    ok = isinstance(value, list) and all(
        isinstance(item, dict) and isinstance(item.get("key"), str) for item in value
    )
    if not ok:
        raise ApiError(400, f"'{field}' must be a list of {{key, value}} objects.")
    return [{"key": item["key"], "value": item.get("value")} for item in value]
