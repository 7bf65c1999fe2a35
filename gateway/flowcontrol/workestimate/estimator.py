"""Choose the estimator for a request (Kubernetes' ``width.go`` dispatch, plus rules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from gateway.flowcontrol.digest import UNIT_WORK, RequestDigest, WorkEstimate
from gateway.flowcontrol.workestimate.adaptive import AdaptiveEstimator
from gateway.flowcontrol.workestimate.kube import (
    EstimatorConfig,
    ObjectCountTracker,
    WatchTracker,
    group_resource,
    list_seats,
    mutating_work,
)
from gateway.flowcontrol.workestimate.rules import WorkRule

MUTATING_VERBS: Final = frozenset({"create", "update", "patch", "delete"})


@dataclass(frozen=True, slots=True)
class RequestView:
    """The raw HTTP facts rules match on (the digest has the Kubernetes-level ones)."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Estimate:
    work: WorkEstimate
    # Set when the adaptive estimator should learn from this request's service time.
    route: str | None = None
    # Interested watches seen by the mutating estimator (``watch_count_samples``).
    watch_count: int | None = None


# Shared answers for the common widths: an estimate is immutable, so most requests allocate none
# (kept: >= 1% of APF-on instructions, docs/performance.md).
_UNIT: Final = Estimate(UNIT_WORK)
_BY_SEATS: Final = (_UNIT, *(Estimate(WorkEstimate(n)) for n in range(1, 257)))


def _seats(seats: int) -> Estimate:
    return _BY_SEATS[seats] if 0 < seats < 257 else Estimate(WorkEstimate(seats))


class WorkEstimator:
    """``estimate(digest, cap, view)``; ``cap`` is the level's max seats (0: global limit)."""

    def __init__(
        self,
        *,
        now: Callable[[], float],
        config: EstimatorConfig | None = None,
        rules: Sequence[WorkRule] = (),
        adaptive: AdaptiveEstimator | None = None,
        kubernetes: bool = True,
    ) -> None:
        self.now = now
        self.config = config or EstimatorConfig()
        self.rules = tuple(rules)
        self.adaptive = adaptive
        self.kubernetes = kubernetes
        self.counts = ObjectCountTracker(self.config.count_ttl)
        self.watches = WatchTracker()

    def estimate(
        self, digest: RequestDigest, cap: int, view: RequestView | None = None
    ) -> Estimate:
        if self.rules and view is not None:
            for rule in self.rules:
                if rule.match.matches(view.method, view.path, view.headers, view.query):
                    if rule.adaptive and self.adaptive is not None:
                        seats = self.adaptive.seats(rule.name)
                        return Estimate(WorkEstimate(seats), route=rule.name)
                    return Estimate(rule.work)
        info = digest.info
        if not self.kubernetes or not info.is_resource_request:
            return _UNIT
        config = self.config
        verb = info.verb
        if verb in ("list", "watch"):
            limit = _cap(cap, config.maximum_list_seats)
            return _seats(list_seats(info, self.counts, config, limit, self.now))
        if verb in MUTATING_VERBS:
            limit = _cap(cap, config.maximum_mutating_seats)
            work, count = mutating_work(info, self.watches, config, limit)
            return Estimate(work, watch_count=count)
        return _UNIT

    def observe_list(self, digest: RequestDigest, item_count: int, body_bytes: int) -> None:
        """Learn a collection's size from a complete list response the gateway proxied."""
        info = digest.info
        self.counts.observe(
            group_resource(info), info.namespace, item_count, body_bytes, self.now()
        )


def _cap(level_cap: int, global_limit: int) -> int:
    """Kubernetes: the level's max seats, unless unset (0) or above the global limit."""
    return level_cap if 0 < level_cap <= global_limit else global_limit
