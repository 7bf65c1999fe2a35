"""Work estimates (seats): Kubernetes' list/watch/mutating estimators for Kubernetes-shaped
traffic, configurable rules and an adaptive per-route estimator for everything else."""

from gateway.flowcontrol.workestimate.adaptive import AdaptiveEstimator
from gateway.flowcontrol.workestimate.estimator import RequestView, WorkEstimator
from gateway.flowcontrol.workestimate.kube import (
    EstimatorConfig,
    ObjectCountTracker,
    WatchTracker,
)
from gateway.flowcontrol.workestimate.rules import RuleMatch, WorkRule

__all__ = [
    "AdaptiveEstimator",
    "EstimatorConfig",
    "ObjectCountTracker",
    "RequestView",
    "RuleMatch",
    "WatchTracker",
    "WorkEstimator",
    "WorkRule",
]
