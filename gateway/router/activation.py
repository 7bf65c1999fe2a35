"""Activation records as OpenWhisk writes them (``platform-reference.md`` section 2)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from gateway.platform.actions import ActionInfo

TIMEOUT = "The action exceeded its time limits of {} milliseconds."
INIT_TIMEOUT = "The action exceeded its time limits of {} milliseconds during initialization."
INIT_EXITED = "The action did not initialize and exited unexpectedly."
RUN_EXITED = "The action did not produce a valid response and exited unexpectedly."
THROTTLED = "Too many concurrent requests in flight."
ROUTER_LOST = "The router running the activation stopped before the activation ended."
NO_PEER = "No router owning the action's containers answered."


class Status(enum.IntEnum):
    SUCCESS = 0
    APPLICATION_ERROR = 1
    DEVELOPER_ERROR = 2
    WHISK_ERROR = 3

    @property
    def text(self) -> str:
        return ("success", "application error", "action developer error", "whisk internal error")[
            self
        ]


@dataclass(slots=True)
class Outcome:
    status: Status
    result: dict[str, Any]
    start_ms: int = 0
    end_ms: int = 0
    wait_ms: int = 0
    init_ms: int | None = None
    timed_out: bool = False
    container: str | None = None
    logs: list[str] = field(default_factory=list)


def error_outcome(status: Status, message: str, **kw: Any) -> Outcome:
    return Outcome(status, {"error": message}, **kw)


def compose(
    activation_id: str, action: ActionInfo, subject: str, outcome: Outcome
) -> dict[str, Any]:
    annotations: list[dict[str, Any]] = [
        {"key": "path", "value": action.path},
        {"key": "kind", "value": action.kind},
        {"key": "waitTime", "value": outcome.wait_ms},
        {"key": "timeout", "value": outcome.timed_out},
        {"key": "limits", "value": action.limits()},
        {"key": "container", "value": outcome.container},
    ]
    if outcome.init_ms is not None:
        annotations.insert(3, {"key": "initTime", "value": outcome.init_ms})
    return {
        "activationId": activation_id,
        "namespace": action.namespace,
        "name": action.name,
        "subject": subject,
        "version": action.version,
        "publish": False,
        "start": outcome.start_ms,
        "end": outcome.end_ms,
        "duration": outcome.end_ms - outcome.start_ms,
        "response": {
            "status": outcome.status.text,
            "statusCode": int(outcome.status),
            "success": outcome.status is Status.SUCCESS,
            "result": outcome.result,
        },
        "logs": outcome.logs,
        "annotations": annotations,
    }
