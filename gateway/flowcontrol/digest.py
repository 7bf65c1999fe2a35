"""What the core knows about a request: who sent it, what it asks for, and how much work it is.

These mirror Kubernetes' ``user.Info``, ``request.RequestInfo`` and ``WorkEstimate``; the front
door builds them (authentication + path parsing), the core only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

# Verbs that only read (the rest are "mutating"), as kube-apiserver's request_kind label uses.
READ_ONLY_VERBS: Final = frozenset({"get", "list", "watch"})


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """Kubernetes ``RequestInfo``; for non-resource requests only ``path`` and ``verb`` matter."""

    is_resource_request: bool
    path: str
    verb: str
    api_prefix: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    parts: tuple[str, ...] = ()
    # Selected query parameters the work estimators read (limit, resourceVersion, ...).
    query: tuple[tuple[str, str], ...] = ()

    @property
    def is_read_only(self) -> bool:
        return self.verb in READ_ONLY_VERBS

    def query_value(self, key: str) -> str:
        for k, v in self.query:
            if k == key:
                return v
        return ""


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """Seats held while executing (initial), then for ``additional_latency`` seconds (final)."""

    initial_seats: int = 1
    final_seats: int = 0
    additional_latency: float = 0.0
    # Derived once: the queue set reads it several times per request.
    max_seats: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_seats", max(self.initial_seats, self.final_seats, 1))


UNIT_WORK: Final = WorkEstimate()


@dataclass(frozen=True, slots=True)
class RequestDigest:
    user: UserInfo
    info: RequestInfo
    # Kubernetes' long-running requests: watches, exec, proxy, logs, ... (routes may add more).
    long_running: bool = False
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def bypasses_flow_control(self) -> bool:
        """Long-running requests other than watches skip flow control, as in Kubernetes."""
        return self.long_running and self.info.verb != "watch"
