"""Helpers for the configuration tests: build documents, collect the errors one object gets."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from gateway.apfconfig.configset import ConfigErrors, ConfigSet
from gateway.apfconfig.loader import load_text

V1 = "flowcontrol.apiserver.k8s.io/v1"
V1BETA3 = "flowcontrol.apiserver.k8s.io/v1beta3"

ALL_RESOURCES = {
    "verbs": ["*"],
    "apiGroups": ["*"],
    "resources": ["*"],
    "clusterScope": True,
    "namespaces": ["*"],
}
ALL_NONRESOURCE = {"verbs": ["*"], "nonResourceURLs": ["*"]}


def fs_doc(name: str = "system-foo", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "matchingPrecedence": 50,
        "priorityLevelConfiguration": {"name": "system-bar"},
        "rules": [
            {
                "subjects": [{"kind": "User", "user": {"name": "noxu"}}],
                "resourceRules": [copy.deepcopy(ALL_RESOURCES)],
            }
        ],
    }
    base.update(spec)
    return {"apiVersion": V1, "kind": "FlowSchema", "metadata": {"name": name}, "spec": base}


def rule(**fields: Any) -> dict[str, Any]:
    """A rule with one User subject; ``fields`` replace or add keys."""
    out: dict[str, Any] = {"subjects": [{"kind": "User", "user": {"name": "noxu"}}]}
    out.update(fields)
    return out


def pl_doc(name: str = "system-foo", api: str = V1, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": 100,
            "limitResponse": {
                "type": "Queue",
                "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50},
            },
        },
    }
    base.update(spec)
    return {
        "apiVersion": api,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": base,
    }


def queuing(**q: int) -> dict[str, Any]:
    return {
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": 100,
            "limitResponse": {"type": "Queue", "queuing": q},
        },
    }


def dump(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def load(*docs: dict[str, Any]) -> ConfigSet:
    return load_text(dump(*docs), source="test.yaml")


def errors_of(*docs: dict[str, Any]) -> list[str]:
    """``field: message`` lines of every error (empty when the documents are valid)."""
    try:
        load(*docs)
    except ConfigErrors as exc:
        return [f"{e.field}: {e.message}" if e.field else e.message for e in exc.errors]
    return []
