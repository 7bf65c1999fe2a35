"""Fuzzing the two loaders: any input gives validation errors, never another exception.

Runs a few seconds by default; set ``APF_FUZZ_EXAMPLES`` (e.g. 20000) for a longer run by hand
(CONTRIBUTING.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import typing
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.apfconfig.configset import ConfigErrors, ConfigLimits, ConfigSet
from gateway.apfconfig.loader import load_text
from gateway.settings.guard import unstated_changes
from gateway.settings.load import SettingsError, settings_from_document, yaml_key
from gateway.settings.model import API_VERSION, KIND, GatewaySettings
from gateway.settings.sources import ConfigLoadError, LoadedConfig, load_config

EXAMPLES = int(os.environ.get("APF_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL = ConfigLimits(max_bytes=20_000, max_objects=20, max_errors=5)

_WORDS = [
    "FlowSchema", "PriorityLevelConfiguration", "List", "FlowSchemaList", KIND,
    "flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3", API_VERSION,
    "Limited", "Exempt", "Queue", "Reject", "User", "Group", "ServiceAccount", "ByUser",
    "exempt", "catch-all", "global-default", "*", "/", "get", "1s", "0", "-1", "nan", "inf",
    "1e999", "0.0.0.0:80", "http://x", "true", "\u00b2",
]  # fmt: skip
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(_WORDS)
    | st.text(max_size=6)
)
_KEYS = st.sampled_from(
    ["apiVersion", "kind", "metadata", "name", "spec", "items", "rules", "subjects", "type",
     "limited", "exempt", "queuing", "limitResponse", "annotations", "generation", "status",
     "conditions", "priorityLevelConfiguration", "matchingPrecedence", "resourceRules",
     "nonResourceRules", "verbs", "user", "group", "serviceAccount", "namespace"]
) | st.text(max_size=6)  # fmt: skip
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=20,
)
_KIND = st.sampled_from(["FlowSchema", "PriorityLevelConfiguration", "List", KIND]) | _VALUES
_API = st.sampled_from(["flowcontrol.apiserver.k8s.io/v1", "v1", API_VERSION]) | _VALUES
_DOCS = st.lists(
    st.fixed_dictionaries({"kind": _KIND, "apiVersion": _API}, optional={"metadata": _VALUES,
                          "spec": _VALUES, "items": _VALUES, "status": _VALUES}),
    min_size=1, max_size=3,
)  # fmt: skip
# What YAML can hold and JSON cannot (issue 21 item 8): ``safe_dump`` writes these as
# ``!!binary``, ``!!timestamp`` and ``!!set`` values, and keys that are not strings.
_YAML_ONLY = (
    st.binary(max_size=4)
    | st.dates()
    | st.datetimes()
    | st.sets(st.integers(0, 3), max_size=2)
    | st.dictionaries(st.integers(-2, 2) | st.booleans() | st.none(), _SCALARS, min_size=1)
)


def _inject(docs: Any, value: Any, where: int) -> None:
    """Put ``value`` into the ``where``-th mapping or list of ``docs`` (counted modulo)."""
    containers: list[Any] = []
    todo = list(docs)
    while todo:
        node = todo.pop()
        if isinstance(node, dict | list):
            containers.append(node)
            todo += node.values() if isinstance(node, dict) else node
    target = containers[where % len(containers)]
    if isinstance(target, dict):
        target["odd"] = value
    else:
        target.append(value)


def _yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)  # keys of mixed types do not sort


def _only_config_errors(text: str, source: str) -> None:
    try:
        load_text(text, source=source, limits=SMALL)
    except ConfigErrors as exc:
        assert exc.errors and all(str(e) for e in exc.errors)
        assert len(exc.errors) <= SMALL.max_errors


@FUZZ
@given(docs=_DOCS)
def test_flow_control_loader_gives_only_config_errors(docs: list[dict[str, Any]]) -> None:
    text = yaml.safe_dump_all(docs)
    _only_config_errors(text, "fuzz.yaml")
    if len(docs) == 1:
        _only_config_errors(json.dumps(docs[0]), "fuzz.json")


@FUZZ
@given(docs=_DOCS, odd=_YAML_ONLY, where=st.integers(0, 40))
def test_yaml_values_json_cannot_hold_give_only_config_errors(
    docs: list[dict[str, Any]], odd: Any, where: int
) -> None:
    _inject(docs, odd, where)
    _only_config_errors(_yaml(docs), "fuzz.yaml")


@FUZZ
@given(docs=_DOCS, as_json=st.booleans(), odd=st.none() | _YAML_ONLY, where=st.integers(0, 40))
def test_load_config_from_files_gives_only_config_load_errors(
    docs: list[dict[str, Any]], as_json: bool, odd: Any, where: int
) -> None:
    """The path ``serve`` and ``config validate`` take: both loaders over real files."""
    if odd is not None:
        _inject(docs, odd, where)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / ("c.json" if as_json else "c.yaml")
        f.write_text(json.dumps(docs[0], default=str) if as_json else _yaml(docs))
        try:
            load_config([f], limits=SMALL)
        except ConfigLoadError as exc:
            assert exc.errors and all(e.startswith(str(f)) for e in exc.errors), exc.errors


@FUZZ
@given(text=st.text(alphabet="-:[]{}&*!|>'\"#%@`,?\n \tab01", max_size=60))
def test_yaml_and_json_text_gives_only_config_errors(text: str) -> None:
    _only_config_errors(text, "fuzz.yaml")
    _only_config_errors(text, "fuzz.json")


def _paths(tp: Any, prefix: str = "") -> list[str]:
    """Every document key path of the settings model (``proxy.readTimeout``, ...)."""
    out = []
    for f in dataclasses.fields(tp):
        path = f"{prefix}.{yaml_key(f)}" if prefix else yaml_key(f)
        out.append(path)
        hint = typing.get_type_hints(tp)[f.name]
        if dataclasses.is_dataclass(hint):
            out += _paths(hint, path)
        elif typing.get_origin(hint) is tuple and dataclasses.is_dataclass(
            typing.get_args(hint)[0]
        ):
            out += _paths(typing.get_args(hint)[0], path + ".0")
    return out


_SETTING_PATHS = _paths(GatewaySettings)


def _put(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at ``path``, creating mappings (and one-item lists for ``.0``)."""
    node: Any = doc
    keys = path.split(".")
    for i, key in enumerate(keys[:-1]):
        if key == "0":
            if not (isinstance(node, list) and node and isinstance(node[0], dict)):
                return
            node = node[0]
            continue
        if not isinstance(node, dict):
            return
        nxt = node.get(key)
        if not isinstance(nxt, dict | list):
            nxt = [{}] if keys[i + 1] == "0" else {}
            node[key] = nxt
        node = nxt
    if isinstance(node, dict):
        node[keys[-1]] = value


@FUZZ
@given(
    edits=st.lists(st.tuples(st.sampled_from(_SETTING_PATHS), _VALUES), min_size=1, max_size=6),
    extra=st.dictionaries(_KEYS, _VALUES, max_size=2),
)
def test_gateway_configuration_loader_gives_only_settings_errors(
    edits: list[tuple[str, Any]], extra: dict[str, Any]
) -> None:
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, **extra}
    for path, value in edits:
        _put(doc, path, value)
    try:
        settings = settings_from_document("fuzz.yaml", 1, doc)
    except SettingsError as exc:
        assert exc.errors and all(e.startswith("fuzz.yaml: document 1: ") for e in exc.errors)
        return
    loaded = LoadedConfig(settings, None, ConfigSet(), frozenset(doc), "fuzz.yaml")
    assert isinstance(unstated_changes(GatewaySettings(), loaded), list)
