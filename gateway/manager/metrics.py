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
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping, Sized
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.manager.core import ManagerCore


class Observed(Protocol):
    """What the gauges read of the manager: ``service.ManagerService``, which owns the metrics
    (and so is not imported here)."""

    @property
    def core(self) -> ManagerCore: ...

    @property
    def stems(self) -> Mapping[str, Sized]: ...


class _View(Collector):
    def __init__(self, service: Callable[[], Observed | None]) -> None:
        self._service = service

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
            for state, n in sorted(states.items()):
                containers.add_metric([state], n)
            for kind, handles in sorted(service.stems.items()):
                stems.add_metric([kind], len(handles))
            routers.add_metric([], len(service.core.routers))
        yield from (containers, stems, routers)


class ManagerMetrics:
    def __init__(self, service: Callable[[], Observed | None] = lambda: None) -> None:
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
        r.register(_View(service))
