"""Kubernetes API defaulting of the decoded wire form (``pkg/apis/flowcontrol/v1*/defaults.go``).

Runs after strict decoding and before validation, exactly where the API server runs it, and
returns a new dict. v1beta3 differs in one place: ``nominalConcurrencyShares`` is a plain int
there, so 0 means "unset" (defaulted to 30) unless the round-trip annotation
``flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares`` says the zero is meant; that
annotation is then dropped, as the v1beta3 -> internal conversion does.
"""

from __future__ import annotations

import copy
from typing import Any

from gateway.apfconfig.validation import PRESERVE_ZERO_ANNOTATION
from gateway.flowcontrol.objects import (
    DEFAULT_HAND_SIZE,
    DEFAULT_MATCHING_PRECEDENCE,
    DEFAULT_NOMINAL_CONCURRENCY_SHARES,
    DEFAULT_QUEUE_LENGTH_LIMIT,
    DEFAULT_QUEUES,
)

V1 = "flowcontrol.apiserver.k8s.io/v1"
V1BETA3 = "flowcontrol.apiserver.k8s.io/v1beta3"
SUPPORTED_API_VERSIONS = (V1, V1BETA3)


def default_flow_schema(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    spec = out.setdefault("spec", {})
    if spec.get("matchingPrecedence", 0) == 0:
        spec["matchingPrecedence"] = DEFAULT_MATCHING_PRECEDENCE
    return out


def default_priority_level(obj: dict[str, Any], api_version: str = V1) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    spec = out.setdefault("spec", {})
    annotations: dict[str, str] = meta.get("annotations", {})
    limited = spec.get("limited")
    if limited is not None:
        if api_version == V1BETA3:
            if limited.get("nominalConcurrencyShares", 0) == 0:
                keep_zero = PRESERVE_ZERO_ANNOTATION in annotations
                limited["nominalConcurrencyShares"] = (
                    0 if keep_zero else DEFAULT_NOMINAL_CONCURRENCY_SHARES
                )
        elif "nominalConcurrencyShares" not in limited:
            limited["nominalConcurrencyShares"] = DEFAULT_NOMINAL_CONCURRENCY_SHARES
        limited.setdefault("lendablePercent", 0)
        queuing = limited.get("limitResponse", {}).get("queuing")
        if queuing is not None:
            for key, default in (
                ("queues", DEFAULT_QUEUES),
                ("handSize", DEFAULT_HAND_SIZE),
                ("queueLengthLimit", DEFAULT_QUEUE_LENGTH_LIMIT),
            ):
                if queuing.get(key, 0) == 0:
                    queuing[key] = default
    exempt = spec.get("exempt")
    if exempt is not None:
        exempt.setdefault("nominalConcurrencyShares", 0)
        exempt.setdefault("lendablePercent", 0)
    if api_version == V1BETA3 and PRESERVE_ZERO_ANNOTATION in annotations:
        del annotations[PRESERVE_ZERO_ANNOTATION]
    return out
