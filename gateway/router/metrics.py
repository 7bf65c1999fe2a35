"""The router's Prometheus metrics, on ``GET /metrics``, in a registry of its own.

One registry per ``Router`` (never the process-global default), so several routers in one
test process do not collide. Names (``docs/platform.md``, "Metrics"):

- ``apf_router_invocations_total{namespace, action, status}``: activations run or refused
  here; ``status`` is ``success``, ``application_error``, ``developer_error``,
  ``whisk_error`` or ``throttled`` (no container slot in time, quota, manager unavailable).
- ``apf_router_cold_starts_total{namespace, action}`` and
  ``apf_router_init_duration_seconds{kind}``: activations that had to ``/init`` a container.
- ``apf_router_wait_duration_seconds{start}``: arrival to the start of init (``cold``) or run
  (``warm``): the time spent waiting for a container slot.
- ``apf_router_containers{namespace, action, state}``: containers held now, by ``state``
  ``busy`` (a run or init in flight), ``paused`` or ``warm`` (idle, running).
- ``apf_router_activation_write_failures_total``: failed batch writes of activation records
  (the writer keeps the records and retries).
- ``apf_router_action_cache_evictions_total{limit}``: action documents the cache let go of to
  stay within ``--action-cache-bytes`` (``limit="bytes"``, also a document larger than the
  whole bound, never kept) or ``--action-cache-entries`` (``entries``);
  ``apf_router_action_cache_bytes`` and ``apf_router_action_cache_entries``: what it holds.

Series exist from zero where their labels are known in advance (``rate()`` and ``increase()``
see no step into a series that appears with its first event): ``kind`` for the supported
kinds, ``start``, ``limit``; an action's ``status`` and ``state`` series all appear with its
first activation here, so its later outcomes step from 0.

An action's series go when it is deleted (through this router, or seen gone when this router
reads it again), and, so that a tenant creating actions cannot grow the scrape, when more than
``max_actions`` (``--action-cache-entries``) actions have series here: the one whose last
activation here is the oldest goes (its counters start from 0 again at its next activation,
which ``rate()`` reads as a counter reset). Container churn does not remove them: an action run
every 15 minutes keeps its counters although its containers idle out in between.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.platform.actions import SUPPORTED_KIND_PREFIXES, ActionInfo
from gateway.router.activation import Outcome, Status
from gateway.router.lru import Lru
from gateway.router.pool import WarmContainer

STATUS = {
    Status.SUCCESS: "success",
    Status.APPLICATION_ERROR: "application_error",
    Status.DEVELOPER_ERROR: "developer_error",
    Status.WHISK_ERROR: "whisk_error",
}
INIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
STATES = ("busy", "paused", "warm")
LIMITS = ("bytes", "entries")


class _Containers(Collector):
    def __init__(self, containers: Callable[[], Iterable[WarmContainer]]) -> None:
        self._containers = containers

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "apf_router_containers",
            "Containers this router holds, by action and state (busy, paused, warm).",
            labels=["namespace", "action", "state"],
        )
        counts: Tally[tuple[str, str, str]] = Tally()
        actions: set[tuple[str, str]] = set()
        for c in self._containers():
            path = c.key.rpartition("@")[0]
            namespace, _, name = path.partition("/")
            state = "busy" if c.in_flight else ("paused" if c.paused else "warm")
            counts[(namespace, name, state)] += 1
            actions.add((namespace, name))
        for namespace, name in sorted(actions):  # every state of an action held, 0 included
            for state in STATES:
                family.add_metric([namespace, name, state], counts[(namespace, name, state)])
        yield family


class _ActionCache(Collector):
    def __init__(self, cache: Lru[Any, Any]) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "apf_router_action_cache_bytes",
            "Encoded size of the action documents this router holds (--action-cache-bytes).",
            value=self._cache.bytes,
        )
        yield GaugeMetricFamily(
            "apf_router_action_cache_entries",
            "Action documents this router holds (--action-cache-entries).",
            value=len(self._cache),
        )


class RouterMetrics:
    def __init__(
        self,
        containers: Callable[[], Iterable[WarmContainer]] = tuple,
        kinds: Iterable[str] = SUPPORTED_KIND_PREFIXES,
        *,
        max_actions: int = 4096,
        cache: Lru[Any, Any] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.invocations = Counter(
            "apf_router_invocations",
            "Activations handled by this router, by outcome.",
            ["namespace", "action", "status"],
            registry=r,
        )
        self.cold_starts = Counter(
            "apf_router_cold_starts",
            "Activations that initialized a container (/init).",
            ["namespace", "action"],
            registry=r,
        )
        self.init_seconds = Histogram(
            "apf_router_init_duration_seconds",
            "Time /init took on cold starts.",
            ["kind"],
            buckets=INIT_BUCKETS,
            registry=r,
        )
        self.wait_seconds = Histogram(
            "apf_router_wait_duration_seconds",
            "Arrival to the start of init (cold) or run (warm): waiting for a container slot.",
            ["start"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.write_failures = Counter(
            "apf_router_activation_write_failures",
            "Failed batch writes of activation records (kept and retried).",
            registry=r,
        )
        self.activations_dropped = Counter(
            "apf_router_activations_dropped",
            "Activation records dropped because the store was down longer than the buffer "
            "(--activation-buffer) holds.",
            registry=r,
        )
        self.action_cache_evictions = Counter(
            "apf_router_action_cache_evictions",
            "Action documents dropped from the cache to stay within a bound, by limit "
            "(--action-cache-bytes, --action-cache-entries).",
            ["limit"],
            registry=r,
        )
        r.register(_Containers(containers))
        if cache is not None:
            r.register(_ActionCache(cache))
        # actions with series here, the least recently run first
        self._seen: Lru[tuple[str, str], bool] = Lru(max_actions)
        for kind in kinds:
            self.init_seconds.labels(kind)
        for start in ("cold", "warm"):
            self.wait_seconds.labels(start)
        for limit in LIMITS:
            self.action_cache_evictions.labels(limit)

    def _first_sight(self, action: ActionInfo) -> None:
        """Every series of an action at 0 when it first runs (or is refused) here; beyond
        ``max_actions``, the least recently run action's series go."""
        key = (action.namespace, action.name)
        if self._seen.get(key):
            return
        for evicted in self._seen.put(key, True):
            self._remove(*evicted.key)
        for status in (*STATUS.values(), "throttled"):
            self.invocations.labels(action.namespace, action.name, status)
        self.cold_starts.labels(action.namespace, action.name)
        self.init_seconds.labels(action.kind)

    def forget(self, namespace: str, name: str) -> None:
        """The action is gone: its series go from the next scrape."""
        if self._seen.pop((namespace, name)):
            self._remove(namespace, name)

    def _remove(self, namespace: str, name: str) -> None:
        for status in (*STATUS.values(), "throttled"):
            self.invocations.remove(namespace, name, status)
        self.cold_starts.remove(namespace, name)

    def observe(self, action: ActionInfo, outcome: Outcome) -> None:
        self._first_sight(action)
        self.invocations.labels(action.namespace, action.name, STATUS[outcome.status]).inc()
        cold = outcome.init_ms is not None
        if cold:
            self.cold_starts.labels(action.namespace, action.name).inc()
            self.init_seconds.labels(action.kind).observe((outcome.init_ms or 0) / 1000)
        self.wait_seconds.labels("cold" if cold else "warm").observe(outcome.wait_ms / 1000)

    def throttled(self, action: ActionInfo) -> None:
        self._first_sight(action)
        self.invocations.labels(action.namespace, action.name, "throttled").inc()


class CountingStore:
    """Delegates to a store, counting failed ``put_activations`` (the writer's only write)."""

    def __init__(self, store: Any, failures: Counter) -> None:
        self._store = store
        self._failures = failures

    async def put_activations(self, records: Sequence[dict[str, Any]]) -> None:
        try:
            await self._store.put_activations(records)
        except Exception:
            self._failures.inc()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
