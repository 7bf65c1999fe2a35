"""Kubernetes' mandatory and suggested APF objects, from the YAML shipped in this package.

The YAML (``mandatory.yaml``, ``suggested.yaml``) is package data so a non-editable install has
it; ``config/flowcontrol/`` holds identical copies for users to read and start from (a test keeps
them identical). Values are those of ``k8s.io/apiserver pkg/apis/flowcontrol/bootstrap`` in
their defaulted form, each with ``apf.kubernetes.io/autoupdate-spec: "true"``.
"""

from __future__ import annotations

from gateway.apfconfig.configset import ConfigSet
from gateway.apfconfig.loader import (
    MANDATORY_FILE,
    SUGGESTED_FILE,
    flow_schema_spec_differs,
    priority_level_spec_differs,
    shipped,
    shipped_mandatory,
)
from gateway.apfconfig.loader import shipped_text as read_text

__all__ = [
    "MANDATORY_FILE",
    "SUGGESTED_FILE",
    "defaults",
    "flow_schema_spec_differs",
    "mandatory",
    "priority_level_spec_differs",
    "read_text",
    "suggested",
]


def mandatory() -> ConfigSet:
    return shipped_mandatory()


def suggested() -> ConfigSet:
    return shipped(SUGGESTED_FILE, True)


def defaults() -> ConfigSet:
    """Mandatory + suggested: what a fresh cluster has."""
    m, s = mandatory(), suggested()
    return ConfigSet(m.flow_schemas + s.flow_schemas, m.priority_levels + s.priority_levels)
