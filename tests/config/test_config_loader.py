# ruff: noqa: E501  (exact error lines)
"""Input formats, strict decoding, defaulting, and where errors point (file, document, object)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_testlib import V1BETA3, dump, fs_doc, load, pl_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import ConfigErrors
from gateway.apfconfig.ensure import with_status
from gateway.apfconfig.loader import load_documents, load_paths, load_text

FIXTURES = Path(__file__).parent / "fixtures"


def _errors(text: str, source: str = "config/x.yaml") -> list[str]:
    with pytest.raises(ConfigErrors) as exc:
        load_text(text, source=source)
    return [str(e) for e in exc.value.errors]


def test_error_names_file_document_object_and_field() -> None:
    text = dump(
        fs_doc("a"),
        pl_doc("foo", limited={"limitResponse": {"type": "Queue", "queuing": {"handSize": 70}}}),
    )
    assert _errors(text) == [
        'config/x.yaml: document 2 (PriorityLevelConfiguration "foo"): '
        "spec.limited.limitResponse.queuing.handSize: Invalid value: 70: "
        "should not be greater than queues (64)"
    ]


def test_errors_str_lists_every_error_one_per_line() -> None:
    with pytest.raises(ConfigErrors) as exc:
        load_text(dump(fs_doc("A"), fs_doc("B")), source="f.yaml")
    lines = str(exc.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        'f.yaml: document 1 (FlowSchema "A"): metadata.name: Invalid value: "A"'
    )
    assert lines[1].startswith('f.yaml: document 2 (FlowSchema "B"): metadata.name')


def test_multi_document_stream_with_comments_and_empty_documents() -> None:
    text = (
        "# leading comment\n---\n"
        + dump(pl_doc("p1"))
        + "---\n---\n# only a comment\n---\n"
        + dump(fs_doc("f1"))
    )
    config = load_text(text)
    assert [p.name for p in config.priority_levels] == ["p1"]
    assert [f.name for f in config.flow_schemas] == ["f1"]


def test_kind_list_skips_other_kinds_and_errors_name_the_item() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    doc = {"apiVersion": "v1", "kind": "List", "items": [fs_doc("f1"), pod, pl_doc("p1")]}
    config = load(doc)
    assert [f.name for f in config.flow_schemas] == ["f1"]
    assert [p.name for p in config.priority_levels] == ["p1"]
    doc["items"].append(fs_doc("Bad"))
    assert _errors(dump(doc), "l.yaml")[0].startswith(
        'l.yaml: document 1 item 4 (FlowSchema "Bad"): metadata.name: Invalid value: "Bad"'
    )


def test_typed_lists_imply_kind_and_api_version_of_items() -> None:
    fs_items = [
        {k: v for k, v in fs_doc(n).items() if k not in ("kind", "apiVersion")} for n in ("a", "b")
    ]
    pl_items = [{k: v for k, v in pl_doc("p").items() if k not in ("kind", "apiVersion")}]
    config = load(
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchemaList",
            "items": fs_items,
        },
        {
            "apiVersion": V1BETA3,
            "kind": "PriorityLevelConfigurationList",
            "metadata": {},
            "items": pl_items,
        },
    )
    assert [f.name for f in config.flow_schemas] == ["a", "b"]
    assert [p.name for p in config.priority_levels] == ["p"]


def test_folder_loads_yaml_yml_json_sorted_and_ignores_other_files(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(dump(fs_doc("from-b")))
    (tmp_path / "a.yaml").write_text(dump(fs_doc("from-a")))
    (tmp_path / "c.json").write_text(json.dumps(fs_doc("from-c")))
    (tmp_path / "notes.txt").write_text("not: [yaml")
    (tmp_path / ".hidden.yaml").write_text("not: [yaml")
    (tmp_path / "sub").mkdir()
    config = load_paths([tmp_path])
    assert [f.name for f in config.flow_schemas] == ["from-a", "from-b", "from-c"]


def test_files_and_folders_together_and_missing_paths(tmp_path: Path) -> None:
    f = tmp_path / "one.yaml"
    f.write_text(dump(pl_doc("p")))
    with pytest.raises(ConfigErrors) as exc:
        load_paths([f, tmp_path / "nope.yaml"])
    assert [str(e) for e in exc.value.errors] == [
        f"{tmp_path / 'nope.yaml'}: no such file or directory"
    ]


def test_other_kinds_are_skipped_but_offered_by_load_documents(tmp_path: Path) -> None:
    gw = {
        "apiVersion": "gateway.apf.dev/v1alpha1",
        "kind": "GatewayConfiguration",
        "listen": ":8080",
    }
    path = tmp_path / "all.yaml"
    path.write_text(dump(gw, fs_doc("f")))
    assert [f.name for f in load_paths([path]).flow_schemas] == ["f"]
    docs = load_documents([path])
    assert [(d.file, d.index, d.obj["kind"]) for d in docs] == [
        (str(path), 1, "GatewayConfiguration"),
        (str(path), 2, "FlowSchema"),
    ]
    assert docs[0].obj_dict is docs[0].obj


def test_kubectl_get_output_loads_unchanged() -> None:
    config = load_paths([FIXTURES / "kubectl-get-flowcontrol.yaml"])
    expected = with_status(bootstrap.defaults())
    assert sorted(f.name for f in config.flow_schemas) == sorted(
        f.name for f in expected.flow_schemas
    )
    for fs in config.flow_schemas:
        want = expected.flow_schema(fs.name)
        assert want is not None
        assert fs.spec == want.spec
        assert fs.metadata.generation == 1 and fs.metadata.uid and fs.metadata.resource_version
        assert [(c.type, c.status, c.reason, c.message) for c in fs.conditions] == [
            (c.type, c.status, c.reason, c.message) for c in want.conditions
        ]
        assert fs.conditions[0].last_transition_time == "2026-11-30T08:14:03Z"
    for pl in config.priority_levels:
        want_pl = expected.priority_level(pl.name)
        assert want_pl is not None and pl.spec == want_pl.spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: [\n",
            "x.yaml: document 1: invalid YAML: line 2, column 1: ",
        ),
        (
            "kind: Pod\napiVersion: v1\n---\nkind: x\n  bad: indent\n",
            "x.yaml: document 2: invalid YAML: line 5, column 6: mapping values are not allowed ",
        ),
        (
            "kind: FlowSchema\nkind: List\n",
            "x.yaml: document 1: invalid YAML: line 2, column 1: duplicate field 'kind'",
        ),
        (
            "- just\n- a list\n",
            "x.yaml: document 1: must be a mapping with apiVersion and kind, not list",
        ),
        (
            "metadata: {name: x}\n",
            'x.yaml: document 1 (object "x"): kind: Required value: every document needs apiVersion and kind',
        ),
    ],
)
def test_syntax_and_shape_errors_have_line_numbers(text: str, expected: str) -> None:
    # The parser's own wording differs between libyaml and pure-Python PyYAML; the place does not.
    errs = _errors(text, "x.yaml")
    assert len(errs) == 1 and errs[0].startswith(expected)


def test_json_syntax_error_has_line_number() -> None:
    assert _errors('{\n  "kind": \n}', "x.json") == [
        "x.json: document 1: invalid JSON: line 3, column 1: Expecting value"
    ]


def test_api_versions_and_kinds() -> None:
    v1beta2 = {**fs_doc("f"), "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta2"}
    assert _errors(dump(v1beta2), "x.yaml") == [
        'x.yaml: document 1 (FlowSchema "f"): apiVersion: Unsupported value: "flowcontrol.apiserver.k8s.io/v1beta2": '
        'supported values: "flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3"'
    ]
    odd = {**fs_doc("f"), "kind": "FlowSchemata"}
    assert _errors(dump(odd), "x.yaml") == [
        'x.yaml: document 1 (FlowSchemata "f"): kind: Unsupported value: "FlowSchemata": '
        'supported values: "FlowSchema", "PriorityLevelConfiguration"'
    ]
    assert load({**fs_doc("b3"), "apiVersion": V1BETA3}).flow_schemas[0].name == "b3"


def _with(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node = doc
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("spec.foo", 1, 'unknown field "spec.foo"'),
        (
            "spec.rules.0.resourceRules.0.verb",
            ["get"],
            'unknown field "spec.rules[0].resourceRules[0].verb"',
        ),
        ("metadata.nmae", "x", 'unknown field "metadata.nmae"'),
        ("status.phase", "x", 'unknown field "status.phase"'),
        (
            "spec.matchingPrecedence",
            "abc",
            'spec.matchingPrecedence: Invalid value: "abc": must be an integer',
        ),
        (
            "spec.matchingPrecedence",
            2**31,
            "spec.matchingPrecedence: Invalid value: 2147483648: out of range for int32 (-2147483648..2147483647)",
        ),
        (
            "spec.matchingPrecedence",
            1.5,
            "spec.matchingPrecedence: Invalid value: 1.5: must be an integer",
        ),
        (
            "spec.rules.0.resourceRules.0.clusterScope",
            "yes",
            'spec.rules[0].resourceRules[0].clusterScope: Invalid value: "yes": must be a boolean',
        ),
        (
            "spec.rules.0.resourceRules.0.verbs",
            "get",
            'spec.rules[0].resourceRules[0].verbs: Invalid value: "get": must be a list',
        ),
        (
            "spec.rules.0.subjects.0.user.name",
            42,
            "spec.rules[0].subjects[0].user.name: Invalid value: 42: must be a string (quote it in YAML)",
        ),
        ("spec.rules", {"a": 1}, 'spec.rules: Invalid value: {"a":1}: must be a list'),
        (
            "spec.distinguisherMethod",
            "ByUser",
            'spec.distinguisherMethod: Invalid value: "ByUser": must be an object',
        ),
        (
            "metadata.annotations",
            {"apf.kubernetes.io/autoupdate-spec": True},
            "metadata.annotations[apf.kubernetes.io/autoupdate-spec]: Invalid value: true: must be a string (quote it in YAML)",
        ),
    ],
)
def test_strict_decoding(path: str, value: Any, expected: str) -> None:
    errs = _errors(dump(_with(fs_doc("f"), path, value)), "x.yaml")
    assert errs == [f'x.yaml: document 1 (FlowSchema "f"): {expected}']


def test_metadata_extras_and_nulls_are_accepted() -> None:
    doc = fs_doc("f", distinguisherMethod=None, rules=None)
    doc["metadata"].update(
        uid="u-1",
        resourceVersion="7",
        generation=3,
        creationTimestamp=None,
        labels={"a": "b"},
        managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        finalizers=[],
        selfLink="/x",
    )
    fs = load(doc).flow_schemas[0]
    assert (fs.metadata.uid, fs.metadata.resource_version, fs.metadata.generation) == (
        "u-1",
        "7",
        3,
    )
    assert fs.metadata.labels == (("a", "b"),)
    assert fs.spec.distinguisher_method is None and fs.spec.rules == ()


def test_defaulting_matches_kubernetes() -> None:
    config = load(
        fs_doc("f", matchingPrecedence=None),
        pl_doc("q", limited={"limitResponse": {"type": "Queue", "queuing": {"queues": 0}}}),
        pl_doc("r", limited={"limitResponse": {"type": "Reject"}}),
        pl_doc("exempt", type="Exempt", limited=None, exempt={}),
    )
    assert config.flow_schemas[0].spec.matching_precedence == 1000
    q = config.priority_levels[0].spec.limited
    assert q is not None and q.nominal_concurrency_shares == 30 and q.lendable_percent == 0
    assert q.borrowing_limit_percent is None
    assert q.limit_response.queuing is not None
    qc = q.limit_response.queuing
    assert (qc.queues, qc.hand_size, qc.queue_length_limit) == (64, 8, 50)
    r = config.priority_levels[1].spec.limited
    assert r is not None and r.limit_response.queuing is None
    ex = config.priority_levels[2].spec.exempt
    assert ex is not None and (ex.nominal_concurrency_shares, ex.lendable_percent) == (0, 0)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_PATHS = [
    "spec",
    "spec.rules",
    "spec.rules.0",
    "spec.rules.0.subjects",
    "spec.rules.0.subjects.0",
    "spec.rules.0.subjects.0.kind",
    "spec.rules.0.resourceRules.0",
    "spec.priorityLevelConfiguration",
    "spec.matchingPrecedence",
    "metadata",
    "metadata.name",
    "metadata.annotations",
    "status",
]


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from(_PATHS), value=_JSONISH, as_pl=st.booleans())
def test_any_garbage_gives_config_errors_never_a_traceback(
    path: str, value: Any, as_pl: bool
) -> None:
    doc = pl_doc("p") if as_pl and not path.startswith("spec.") else fs_doc("f")
    doc = _with(doc, path, value)
    for text in (dump(doc), yaml.safe_dump({"kind": "List", "apiVersion": "v1", "items": value})):
        try:
            load_text(text)
        except ConfigErrors as exc:
            assert exc.errors and all(str(e) for e in exc.errors)


def test_negative_generation_is_invalid() -> None:
    doc = fs_doc("f")
    doc["metadata"]["generation"] = -1
    assert _errors(dump(doc), "x.yaml") == [
        'x.yaml: document 1 (FlowSchema "f"): metadata.generation: Invalid value: -1: must be greater than or equal to 0'
    ]
