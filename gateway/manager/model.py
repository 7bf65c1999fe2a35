"""What the manager knows about an action and a container (shared with routers over HTTP)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from gateway.clock import Timer
from gateway.platform.actions import EvictionSafe


class CState(enum.Enum):
    CREATING = "creating"  # reserved under the quota; the backend is starting it
    ASSIGNED = "assigned"  # owned by a live router
    UNASSIGNED = "unassigned"  # warm, owned by nobody; reusable for the same revision
    QUARANTINED = "quarantined"  # its last owner may still use it; nobody gets it yet
    DRAINING = "draining"  # drained while busy: removed once known idle, never handed out
    REMOVING = "removing"  # being stopped; no longer counted


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


@dataclass(slots=True)
class Container:
    id: str
    action: ActionSpec
    state: CState
    owner: str | None = None
    url: str | None = None
    agent: dict[str, Any] = field(default_factory=dict)
    since: float = 0.0
    quarantine_timer: Timer | None = None
    idle_timer: Timer | None = None
    drain: str | None = None  # DRAINING: the disruption's reason, for the removal's records
    secret: str = field(default="", repr=False)  # the runtime's; only its owner router gets it

    def to_json(self, *, secret: bool = False) -> dict[str, Any]:
        out = {
            "id": self.id,
            "action": self.action.to_json(),
            "state": self.state.value,
            "owner": self.owner,
            "url": self.url,
            "agent": self.agent,
        }
        if secret:
            out["secret"] = self.secret
        return out
