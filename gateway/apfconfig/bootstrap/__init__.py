"""Kubernetes' mandatory and suggested APF objects, loaded from the YAML shipped in this package.

The YAML (``mandatory.yaml``, ``suggested.yaml``) is package data so a non-editable install has
it; ``config/flowcontrol/`` holds identical copies for users to read and start from (a test keeps
them identical). Values are those of ``k8s.io/apiserver pkg/apis/flowcontrol/bootstrap`` in
their defaulted form, each with ``apf.kubernetes.io/autoupdate-spec: "true"``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from typing import Any

from gateway.apfconfig.configset import ConfigSet
from gateway.apfconfig.serialize import fs_spec_from_dict, pl_spec_from_dict

MANDATORY_FILE = "mandatory.yaml"
SUGGESTED_FILE = "suggested.yaml"


def read_text(file_name: str) -> str:
    return resources.files(__name__).joinpath(file_name).read_text(encoding="utf-8")


@functools.cache
def _load(file_name: str, fixed_specs: bool) -> ConfigSet:
    from gateway.apfconfig.loader import build_config, parse_text

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


def flow_schema_spec_differs(name: str, spec: Mapping[str, Any]) -> bool:
    """Whether a defaulted wire-form spec differs from mandatory FlowSchema ``name``'s fixed spec
    (semantic equality: an empty list equals an absent one)."""
    want = mandatory().flow_schema(name)
    try:
        return want is None or fs_spec_from_dict(spec) != want.spec
    except (KeyError, ValueError, TypeError):  # not even representable: certainly different
        return True


def priority_level_spec_differs(name: str, spec: Mapping[str, Any]) -> bool:
    """Like ``flow_schema_spec_differs``; for ``exempt`` the ``spec.exempt`` field is ignored,
    since an admin may change it."""
    want = mandatory().priority_level(name)
    try:
        have = pl_spec_from_dict(spec)
    except (KeyError, ValueError, TypeError):
        return True
    if want is None:
        return True
    if name == "exempt":
        have = replace(have, exempt=want.spec.exempt)
    return have != want.spec
