"""Strict structural decoding of the wire form: known fields only, right JSON types, int32 range.

The API server decodes with strict field validation (``unknown field "spec.foo"``) and refuses
wrong types; this does the same before defaulting and validation run, so those can trust that
every present value has its declared type. ``null`` means absent, as in Go's JSON decoding.
Metadata accepts every ``ObjectMeta`` field so ``kubectl get -o yaml`` output loads unchanged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.apfconfig.fielderrors import INVALID, UNKNOWN_FIELD, FieldError


@dataclass(frozen=True, slots=True)
class Obj:
    fields: Mapping[str, Spec]


@dataclass(frozen=True, slots=True)
class ListOf:
    item: Spec


@dataclass(frozen=True, slots=True)
class MapOf:
    value: Spec


Spec = Obj | ListOf | MapOf | str  # str: "string", "int32", "int64", "bool", "time", "any"

_STRINGS = ListOf("string")
_NAME = Obj({"name": "string"})
_CONDITIONS = ListOf(
    Obj(
        {
            "type": "string",
            "status": "string",
            "lastTransitionTime": "time",
            "reason": "string",
            "message": "string",
        }
    )
)
METADATA = Obj(
    {
        "name": "string",
        "generateName": "string",
        "namespace": "string",
        "selfLink": "string",
        "clusterName": "string",  # in dumps from clusters before 1.25
        "uid": "string",
        "resourceVersion": "string",
        "generation": "int64",
        "creationTimestamp": "time",
        "deletionTimestamp": "time",
        "deletionGracePeriodSeconds": "int64",
        "labels": MapOf("string"),
        "annotations": MapOf("string"),
        "ownerReferences": "any",
        "finalizers": _STRINGS,
        "managedFields": "any",
    }
)
FLOW_SCHEMA_SPEC = Obj(
    {
        "priorityLevelConfiguration": _NAME,
        "matchingPrecedence": "int32",
        "distinguisherMethod": Obj({"type": "string"}),
        "rules": ListOf(
            Obj(
                {
                    "subjects": ListOf(
                        Obj(
                            {
                                "kind": "string",
                                "user": _NAME,
                                "group": _NAME,
                                "serviceAccount": Obj({"namespace": "string", "name": "string"}),
                            }
                        )
                    ),
                    "resourceRules": ListOf(
                        Obj(
                            {
                                "verbs": _STRINGS,
                                "apiGroups": _STRINGS,
                                "resources": _STRINGS,
                                "clusterScope": "bool",
                                "namespaces": _STRINGS,
                            }
                        )
                    ),
                    "nonResourceRules": ListOf(
                        Obj({"verbs": _STRINGS, "nonResourceURLs": _STRINGS})
                    ),
                }
            )
        ),
    }
)
PRIORITY_LEVEL_SPEC = Obj(
    {
        "type": "string",
        "limited": Obj(
            {
                "nominalConcurrencyShares": "int32",
                "lendablePercent": "int32",
                "borrowingLimitPercent": "int32",
                "limitResponse": Obj(
                    {
                        "type": "string",
                        "queuing": Obj(
                            {"queues": "int32", "handSize": "int32", "queueLengthLimit": "int32"}
                        ),
                    }
                ),
            }
        ),
        "exempt": Obj({"nominalConcurrencyShares": "int32", "lendablePercent": "int32"}),
    }
)


def _top(spec: Obj) -> Obj:
    return Obj(
        {
            "apiVersion": "string",
            "kind": "string",
            "metadata": METADATA,
            "spec": spec,
            "status": Obj({"conditions": _CONDITIONS}),
        }
    )


FLOW_SCHEMA = _top(FLOW_SCHEMA_SPEC)
PRIORITY_LEVEL = _top(PRIORITY_LEVEL_SPEC)

_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def decode(value: Any, spec: Spec, path: str, errs: list[FieldError]) -> Any:
    """Return ``value`` cleaned (nulls dropped, times as RFC 3339 strings); append problems."""
    if isinstance(spec, Obj):
        if not isinstance(value, Mapping):
            errs.append(FieldError(INVALID, path or "<root>", value, "must be an object"))
            return {}
        out: dict[str, Any] = {}
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if key not in spec.fields:
                errs.append(FieldError(UNKNOWN_FIELD, child))
            elif item is not None:
                out[key] = decode(item, spec.fields[key], child, errs)
        return out
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            errs.append(FieldError(INVALID, path, value, "must be a list"))
            return []
        return [decode(v, spec.item, f"{path}[{i}]", errs) for i, v in enumerate(value)]
    if isinstance(spec, MapOf):
        if not isinstance(value, Mapping):
            errs.append(FieldError(INVALID, path, value, "must be a map"))
            return {}
        return {str(k): decode(v, spec.value, f"{path}[{k}]", errs) for k, v in value.items()}
    return _scalar(value, spec, path, errs)


def _scalar(value: Any, kind: str, path: str, errs: list[FieldError]) -> Any:
    if kind == "any":
        return value
    if kind == "string":
        if isinstance(value, str):
            return value
        errs.append(FieldError(INVALID, path, value, "must be a string (quote it in YAML)"))
        return ""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        errs.append(FieldError(INVALID, path, value, "must be a boolean"))
        return False
    if kind == "time":
        if isinstance(value, dt.datetime | dt.date):
            text = value.isoformat()
            return text.replace("+00:00", "Z")
        if isinstance(value, str):
            return value
        errs.append(FieldError(INVALID, path, value, "must be an RFC 3339 time"))
        return ""
    lo, hi = _INT_RANGE[kind]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        errs.append(FieldError(INVALID, path, value, "must be an integer"))
        return 0
    if not lo <= value <= hi:
        errs.append(FieldError(INVALID, path, value, f"out of range for {kind} ({lo}..{hi})"))
        return 0
    return value
