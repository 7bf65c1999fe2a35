"""The action document: validation of a PUT body, defaults, and the typed view routers use.

Stored documents are plain JSON dicts in OpenWhisk's shape (so the store stays schema-free);
``ActionInfo`` is the frozen, validated view of one revision.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from gateway.platform.errors import ApiError
from gateway.platform.ids import is_entity_name

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


class EvictionSafe(enum.StrEnum):
    """When a container of the action may be disrupted (Agones ``eviction.safe``)."""

    NEVER = "Never"  # run to completion: drained for upgrades only once idle
    ON_UPGRADE = "OnUpgrade"  # may be stopped gracefully for upgrades/drains only
    ALWAYS = "Always"  # may be stopped gracefully for upgrades, space and scale-down


@dataclass(frozen=True, slots=True)
class ActionInfo:
    namespace: str
    name: str
    version: str
    kind: str
    code: str
    main: str
    binary: bool
    parameters: dict[str, Any]
    timeout_ms: int
    memory_mb: int
    logs_mb: int
    concurrency: int
    instances: int
    eviction: EvictionSafe
    annotations: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """Pool key: one revision of one action (containers never serve another revision)."""
        return f"{self.namespace}/{self.name}@{self.version}"

    @property
    def path(self) -> str:
        return f"{self.namespace}/{self.name}"

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
            eviction=EvictionSafe(doc.get("eviction", {}).get("safe", EvictionSafe.NEVER)),
            annotations=tuple((a["key"], a.get("value")) for a in doc.get("annotations", [])),
        )


def validate_put(namespace: str, name: str, body: Any) -> dict[str, Any]:
    """Turn a PUT body into a complete action document (version 0.0.1) or raise 400."""
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
    if kind != "python:default" and not kind.startswith(SUPPORTED_KIND_PREFIXES):
        raise ApiError(400, f"kind '{kind}' is not supported (supported: python:3.x).")
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
    eviction = body.get("eviction") or {}
    raw = eviction.get("safe", "Never") if isinstance(eviction, dict) else None
    try:
        safe = EvictionSafe(str(raw))
    except ValueError:
        allowed = ", ".join(e.value for e in EvictionSafe)
        raise ApiError(400, f"eviction.safe must be one of {allowed}.") from None
    return {
        "namespace": namespace,
        "name": name,
        "version": "0.0.1",
        "publish": bool(body.get("publish", False)),
        "exec": {"kind": kind, "code": code, "main": main, "binary": False},
        "parameters": _key_values(body.get("parameters"), "parameters"),
        "annotations": _key_values(body.get("annotations"), "annotations"),
        "limits": limits,
        "eviction": {"safe": safe.value},
    }


def _key_values(value: Any, field: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    ok = isinstance(value, list) and all(
        isinstance(item, dict) and isinstance(item.get("key"), str) for item in value
    )
    if not ok:
        raise ApiError(400, f"'{field}' must be a list of {{key, value}} objects.")
    return [{"key": item["key"], "value": item.get("value")} for item in value]
