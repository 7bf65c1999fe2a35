"""What the manager knows about an action and a container (shared with routers over HTTP)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from gateway.clock import Timer
from gateway.platform.actions import ActionSpec

__all__ = ["ActionSpec", "CState", "Container"]


class CState(enum.Enum):
    CREATING = "creating"  # reserved under the quota; the backend is starting it
    ASSIGNED = "assigned"  # owned by a live router
    UNASSIGNED = "unassigned"  # warm, owned by nobody; reusable for the same revision
    QUARANTINED = "quarantined"  # its last owner may still use it; nobody gets it yet
    DRAINING = "draining"  # drained while busy: removed once known idle, never handed out
    REMOVING = "removing"  # being stopped; no longer counted


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
