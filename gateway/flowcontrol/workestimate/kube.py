"""Kubernetes' work estimators (``pkg/util/flowcontrol/request``) over what the gateway learns.

kube-apiserver reads object counts from its storage; a gateway learns them from the list
responses it proxies (per resource *and* namespace, so a namespaced list is not charged for
the whole cluster), and counts the watches it is proxying itself.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.flowcontrol.digest import RequestInfo, WorkEstimate
from gateway.flowcontrol.queryvalues import list_options_decode, query_bool


@dataclass(frozen=True, slots=True)
class EstimatorConfig:
    """Kubernetes' ``DefaultWorkEstimatorConfig`` (size-based list costing on, as since 1.34)."""

    minimum_seats: int = 1
    maximum_list_seats: int = 100
    maximum_mutating_seats: int = 10
    objects_per_seat: int = 100
    size_based: bool = True
    bytes_per_seat: int = 100_000
    cache_max_bytes_per_request: int = 1_000_000
    max_object_size: int = 1_500_000
    mutating_enabled: bool = True
    event_additional_duration: float = 0.005
    watches_per_seat: int = 10
    # Learned counts older than this are forgotten (kube-apiserver prunes after an hour).
    count_ttl: float = 3600.0


def group_resource(info: RequestInfo) -> str:
    """``schema.GroupResource.String()``: ``pods`` for the core group, else ``deployments.apps``."""
    return f"{info.resource}.{info.api_group}" if info.api_group else info.resource


@dataclass(slots=True)
class _Count:
    count: int
    avg_size: float
    seen: float


class ObjectCountTracker:
    """Object counts and average sizes per (group-resource, namespace); namespace "" = all."""

    def __init__(self, ttl: float = 3600.0) -> None:
        self.ttl = ttl
        # resource -> namespace -> count: string keys (hashes cached), no tuple per look-up.
        self._counts: dict[str, dict[str, _Count]] = {}

    def observe(
        self, resource: str, namespace: str, count: int, body_bytes: int, now: float
    ) -> None:
        avg = body_bytes / count if count > 0 else 0.0
        by_namespace = self._counts.get(resource)
        if by_namespace is None:
            by_namespace = self._counts[resource] = {}
        by_namespace[namespace] = _Count(count, avg, now)

    def get(self, resource: str, namespace: str, now: Callable[[], float]) -> _Count | None:
        """``now`` is called only when a count is found (to check its age)."""
        by_namespace = self._counts.get(resource)
        if by_namespace is None:
            return None
        found = by_namespace.get(namespace)
        if found is None and namespace:
            found = by_namespace.get("")
        if found is None or now() - found.seen > self.ttl:
            return None
        return found

    def __len__(self) -> int:
        return sum(len(by_namespace) for by_namespace in self._counts.values())


def _watch_key(info: RequestInfo) -> tuple[str, str, str, str]:
    return (info.api_group, info.resource, info.namespace, info.name)


class WatchTracker:
    """Watches being proxied, for the mutating estimator (``watch_tracker.go``)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str, str], int] = defaultdict(int)

    @staticmethod
    def counted(info: RequestInfo) -> bool:
        # A pod watch for one node (fieldSelector spec.nodeName=X) is not counted, as in Kubernetes.
        if info.resource == "pods" and info.api_group == "":
            selector = info.query_value("fieldSelector")
            if selector.startswith("spec.nodeName=") and selector.count("=") == 1:
                return not selector.removeprefix("spec.nodeName=")
        return True

    def register(self, info: RequestInfo) -> bool:
        """Returns whether the watch is counted (then ``forget`` it when it ends)."""
        if not self.counted(info):
            return False
        self._counts[_watch_key(info)] += 1
        return True

    def forget(self, info: RequestInfo) -> None:
        key = _watch_key(info)
        left = self._counts.get(key, 0) - 1
        if left > 0:
            self._counts[key] = left
        else:
            self._counts.pop(key, None)

    def interested(self, info: RequestInfo) -> int:
        if info.verb in ("get", "list", "watch", "proxy"):
            return 0
        group, resource = info.api_group, info.resource
        total = self._counts.get((group, resource, "", ""), 0)
        if info.namespace:
            total += self._counts.get((group, resource, info.namespace, ""), 0)
        if info.name:
            total += self._counts.get((group, resource, info.namespace, info.name), 0)
        return total


def served_from_cache(info: RequestInfo) -> bool:
    """The delegator's choice for a list (consistent reads from the cache assumed supported)."""
    if info.verb == "watch":
        return True
    match = info.query_value("resourceVersionMatch")
    rv = info.query_value("resourceVersion")
    if match == "Exact":
        return False
    if match == "NotOlderThan":
        return True
    if match:
        return False
    if info.query_value("continue"):
        return False
    limit = _int(info.query_value("limit"))
    return not (limit > 0 and rv not in ("", "0"))


def _int(value: str) -> int:
    return int(value) if value.isdigit() else 0


def list_seats(
    info: RequestInfo,
    tracker: ObjectCountTracker,
    config: EstimatorConfig,
    cap: int,
    now: Callable[[], float],
) -> int:
    """``now``: the clock, read only if a learned count has to be checked for age. A watch
    pays for a list only when it asks for its initial events (``sendInitialEvents``, read with
    kube's bool rule): a watch-list; other watches cost the minimum, as in Kubernetes. List
    options that do not decode (``limit=x``) get ``cap``: the request is bound to fail
    validation, and Kubernetes charges it the maximum rather than guess."""
    if info.query and not list_options_decode(info.query):
        return cap
    if info.verb == "watch" and not query_bool(info.query, "sendInitialEvents"):
        return config.minimum_seats
    stats = tracker.get(group_resource(info), info.namespace, now)
    if stats is None:
        return config.minimum_seats
    count = stats.count
    from_cache = served_from_cache(info)
    limit = _int(info.query_value("limit"))
    single = info.name != ""
    selector = bool(info.query_value("fieldSelector") or info.query_value("labelSelector"))
    if config.size_based:
        avg = stats.avg_size if stats.avg_size > 0 or count == 0 else config.max_object_size
        limited = min(count, limit) if limit > 0 else count
        if single:
            objects = 1
        elif from_cache:
            objects = limited
        else:
            objects = max(limited, count // 2) if selector else limited
        memory = objects * avg
        if from_cache:
            memory = min(memory, config.cache_max_bytes_per_request)
        seats = math.ceil(memory / config.bytes_per_seat)
    else:
        limit = min(count, limit) if limit > 0 else count
        if single:
            objects = 1
        elif from_cache:
            objects = count
        else:
            objects = count + limit if selector else 2 * limit
        seats = math.ceil(objects / config.objects_per_seat)
    return max(config.minimum_seats, min(seats, cap))


def mutating_work(
    info: RequestInfo, watches: WatchTracker, config: EstimatorConfig, cap: int
) -> tuple[WorkEstimate, int]:
    """The estimate and the interested-watch count (for ``watch_count_samples``)."""
    if not config.mutating_enabled:
        return WorkEstimate(1), 0
    if info.resource == "serviceaccounts" and info.subresource == "token":
        return WorkEstimate(1), 0
    count = watches.interested(info)
    if count < config.watches_per_seat:
        return WorkEstimate(1), count
    final = math.ceil(count / config.watches_per_seat)
    final_work = final * config.event_additional_duration
    final = min(final, cap)
    return WorkEstimate(1, final, final_work / final), count
