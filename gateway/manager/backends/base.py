"""The container backend contract (JupyterHub-spawner style: what each call returns, when).

A *container* runs one action runtime that speaks the OpenWhisk action-proxy protocol
(``POST /init``, ``POST /run``) at ``handle.url``. The manager is the only caller; it keeps
no backend state of its own beyond the handles, so every call must be safe after a manager
restart, with handles obtained from ``list()``.

- ``create(spec)``: returns a handle once the runtime listens (it is ready); raises
  ``BackendError`` if it cannot start within the backend's start timeout, leaving nothing behind.
- ``remove(handle, grace)``: SIGTERM (continuing a paused container), SIGKILL after ``grace``
  seconds; returns once the container is gone. Idempotent: a gone container returns at once.
  Never refused: the manager uses it for containers that hold no work (idle, failed, given
  back) and on behalf of policies that allow it.
- ``evict(handle, *, grace) -> bool`` (optional capability, see ``can_evict``): a *voluntary
  disruption* of a container that may be busy, which the platform may refuse (a
  PodDisruptionBudget on Kubernetes: the Eviction API). ``True`` once the container is gone
  (stopped as by ``remove(handle, grace)``); ``False`` if it was refused, leaving the
  container untouched and running. Never turns a refusal into a forced removal: the manager
  keeps the container and tries again later. Raises ``BackendError`` for other failures.
  Upgrade drains call it for graceful stops; backends without it get ``remove``.
- ``pause(handle)`` / ``resume(handle)``: stop / continue scheduling it; return when done;
  resuming a running one is a no-op; both raise ``ContainerGone`` for a gone container.
- ``status(handle)``: ``RUNNING``, ``PAUSED`` or ``GONE``; never raises for a gone container.
- ``list()``: every container this backend created that still exists, including those created
  by a previous manager process with the same state (state dir, cluster namespace), each with
  the ``labels`` given at creation (or by ``relabel``). Gone ones are never listed.
- ``agent(handle)``: how a router may act on the container without the manager:
  ``{"pause": "signal", "pid": N}`` lets it pause/resume by signals (same host);
  ``"logs": {"stdout": path, "stderr": path}`` says where the runtime's output can be read.
  An empty dict when it can do neither (the router then never pauses; logs stay empty).

``labels`` are opaque ``str -> str`` metadata the manager uses to rebuild its view after a
restart (which action, stem cell or not). ``relabel`` changes them (a stem cell bound to an
action). Backends never decide policy: eviction, quotas and ownership are the manager's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

from gateway.platform.actions import EvictionSafe


class BackendError(Exception):
    """A container could not be created or acted on."""


class ContainerGone(BackendError):
    """The container does not exist (any more)."""


class Status(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What to start. The typed fields come from the action; backends use what they can
    (the local backend: kind, memory, concurrency, env; Kubernetes: all of them)."""

    id: str
    kind: str
    memory_mb: int = 256
    concurrency: int | None = None  # None: the runtime's default (stem cells)
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None  # a runtime image speaking the action protocol; None: ours
    grace_seconds: int | None = None  # the action's grace period; None: the backend's default
    eviction: EvictionSafe | None = None  # None: not bound to an action (a stem cell)
    pod_template: dict[str, Any] | None = None  # the action's pod template (Kubernetes)
    router: str | None = None  # the router the container is created for


@dataclass(frozen=True, slots=True)
class ContainerHandle:
    id: str
    url: str
    labels: dict[str, str]
    created: float  # epoch seconds
    data: dict[str, Any] = field(default_factory=dict)  # backend-specific (pid, pod name, ...)


class Backend(Protocol):
    name: str

    async def create(self, spec: ContainerSpec) -> ContainerHandle: ...
    async def remove(self, handle: ContainerHandle, grace: float) -> None: ...
    async def pause(self, handle: ContainerHandle) -> None: ...
    async def resume(self, handle: ContainerHandle) -> None: ...
    async def status(self, handle: ContainerHandle) -> Status: ...
    async def list(self) -> list[ContainerHandle]: ...
    async def relabel(self, handle: ContainerHandle, labels: dict[str, str]) -> ContainerHandle: ...
    def agent(self, handle: ContainerHandle) -> dict[str, Any]: ...
    async def close(self) -> None: ...


class Evicting(Protocol):
    """The optional ``evict`` capability (see the module docstring)."""

    async def evict(self, handle: ContainerHandle, *, grace: float) -> bool: ...


def can_evict(backend: object) -> TypeGuard[Evicting]:
    return callable(getattr(backend, "evict", None))
