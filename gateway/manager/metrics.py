"""The manager's Prometheus metrics, on ``GET /metrics``, in a registry of its own.

One registry per ``ManagerService`` (never the process-global default), so in-process tests
do not collide. Names (``docs/platform.md``, "Metrics"):

- ``apf_manager_container_creations_total{kind, source, result}``: ``source`` ``new`` (the
  backend started one), ``stem`` (a prewarmed stem cell was bound) or ``prewarm`` (a stem
  cell started); ``result`` ``ok`` or ``failed``.
- ``apf_manager_container_removals_total{reason}``: a router's give-back reason (``idle``,
  ``timeout``, ``failed``, ``init-failed``, ``upgrade``), a disruption (``upgrade``,
  ``space``, ``scale-down``), ``unassigned-idle``, ``orphaned``, ``unreadable``, ``shutdown``.
- ``apf_manager_quota_rejections_total{namespace, limit}``: acquires answered 429, ``limit``
  ``quota``, ``instances`` or ``evictions`` (every evictable container was busy).
- ``apf_manager_evictions_total{policy, reason, outcome}``: disruptions asked for (drains,
  the evict API, space), by ``eviction.safe`` and ``outcome``: ``stopped`` (graceful stop),
  ``removed-idle`` (given back idle, then removed; for a drained busy container, when it
  is removed after its activation), ``refused`` (the policy table), ``kept`` (its owner did
  not answer), ``budget-refused`` (the backend's eviction was refused, retried later).
- ``apf_manager_containers{state}``, ``apf_manager_stem_cells{kind}``,
  ``apf_manager_routers``: the current view.

Series exist from zero where their labels are known in advance, so ``rate()`` and
``increase()`` see their first step: every ``kind`` given (the prewarmed and supported kinds)
by source and result, every removal reason, every eviction policy, reason and outcome, every
container state; a namespace's rejection series appear at its first acquire.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.manager.core import ManagerCore
from gateway.manager.model import CState
from gateway.manager.policy import Reason
from gateway.platform.actions import SUPPORTED_KIND_PREFIXES, EvictionSafe

SOURCES = ("new", "stem", "prewarm")
RESULTS = ("ok", "failed")
#: a router's give-backs (gateway/router), the disruptions, and the manager's own removals
REMOVAL_REASONS = ("idle", "timeout", "failed", "init-failed", "deleted",
                   *(r.value for r in Reason),
                   "unassigned-idle", "orphaned", "unreadable", "shutdown")  # fmt: skip
LIMITS = ("quota", "instances", "evictions")
OUTCOMES = ("stopped", "removed-idle", "refused", "kept", "budget-refused")


class Observed(Protocol):
    """What the gauges read of the manager: ``service.ManagerService``, which owns the metrics
    (and so is not imported here)."""

    @property
    def core(self) -> ManagerCore: ...

    @property
    def stems(self) -> Mapping[str, Sized]: ...


class _View(Collector):
    def __init__(self, service: Callable[[], Observed | None], kinds: tuple[str, ...]) -> None:
        self._service = service
        self._kinds = kinds

    def collect(self) -> Iterator[Metric]:
        service = self._service()
        containers = GaugeMetricFamily(
            "apf_manager_containers", "Containers the manager knows, by state.", labels=["state"]
        )
        stems = GaugeMetricFamily(
            "apf_manager_stem_cells", "Prewarmed stem cells, by kind.", labels=["kind"]
        )
        routers = GaugeMetricFamily("apf_manager_routers", "Routers holding a live lease.")
        if service is not None:
            states = Tally(c.state.value for c in service.core.containers.values())
            for state in CState:
                containers.add_metric([state.value], states[state.value])
            counts = {kind: 0 for kind in self._kinds} | {
                kind: len(handles) for kind, handles in service.stems.items()
            }
            for kind, n in sorted(counts.items()):
                stems.add_metric([kind], n)
            routers.add_metric([], len(service.core.routers))
        yield from (containers, stems, routers)


class ManagerMetrics:
    def __init__(
        self,
        service: Callable[[], Observed | None] = lambda: None,
        prewarm: Iterable[str] = (),
    ) -> None:
        """``prewarm``: the kinds kept ready (their stem cell gauge exists at 0 from the
        start); they and the supported kinds get their creation series at 0."""
        prewarmed = tuple(dict.fromkeys(prewarm))
        kinds = tuple(dict.fromkeys((*SUPPORTED_KIND_PREFIXES, *prewarmed)))
        self.registry = CollectorRegistry()
        r = self.registry
        self.creations = Counter(
            "apf_manager_container_creations",
            "Containers created (or stem cells bound), by source and result.",
            ["kind", "source", "result"],
            registry=r,
        )
        self.removals = Counter(
            "apf_manager_container_removals",
            "Containers removed, by reason.",
            ["reason"],
            registry=r,
        )
        self.quota_rejections = Counter(
            "apf_manager_quota_rejections",
            "Acquires refused with 429, by namespace and the limit reached.",
            ["namespace", "limit"],
            registry=r,
        )
        self.evictions = Counter(
            "apf_manager_evictions",
            "Disruptions asked for, by eviction.safe policy, reason and outcome.",
            ["policy", "reason", "outcome"],
            registry=r,
        )
        r.register(_View(service, prewarmed))
        self._namespaces: set[str] = set()
        for kind in kinds:
            for source in SOURCES:
                for result in RESULTS:
                    self.creations.labels(kind, source, result)
        for reason in REMOVAL_REASONS:
            self.removals.labels(reason)
        for policy in EvictionSafe:
            for disruption in Reason:
                for outcome in OUTCOMES:
                    self.evictions.labels(policy.value, disruption.value, outcome)

    def namespace_seen(self, namespace: str) -> None:
        """A namespace's rejection series at 0 from its first acquire, before any 429."""
        if namespace not in self._namespaces:
            self._namespaces.add(namespace)
            for limit in LIMITS:
                self.quota_rejections.labels(namespace, limit)
