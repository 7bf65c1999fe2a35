"""Kubernetes' mandatory and suggested APF objects, loaded from the YAML shipped in this package.

The YAML (``mandatory.yaml``, ``suggested.yaml``) is package data so a non-editable install has
it; ``config/flowcontrol/`` holds identical copies for users to read and start from (a test keeps
them identical). Values are those of ``k8s.io/apiserver pkg/apis/flowcontrol/bootstrap`` in
their defaulted form, each with ``apf.kubernetes.io/autoupdate-spec: "true"``.
"""

from __future__ import annotations

import functools
from importlib import resources

from gateway.flowcontrol.configset import ConfigSet

MANDATORY_FILE = "mandatory.yaml"
SUGGESTED_FILE = "suggested.yaml"


def read_text(file_name: str) -> str:
    return resources.files(__name__).joinpath(file_name).read_text(encoding="utf-8")


@functools.cache
def _load(file_name: str, fixed_specs: bool) -> ConfigSet:
    from gateway.flowcontrol.loader import build_config, parse_text

    docs, errors = parse_text(read_text(file_name), file_name)
    return build_config(docs, errors, fixed_specs=fixed_specs)


def mandatory() -> ConfigSet:
    # The mandatory objects define the fixed specs, so they are not checked against themselves.
    return _load(MANDATORY_FILE, False)


def suggested() -> ConfigSet:
    return _load(SUGGESTED_FILE, True)


def defaults() -> ConfigSet:
    """Mandatory + suggested: what a fresh cluster has."""
    m, s = mandatory(), suggested()
    return ConfigSet(m.flow_schemas + s.flow_schemas, m.priority_levels + s.priority_levels)
