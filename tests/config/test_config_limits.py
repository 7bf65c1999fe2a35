# ruff: noqa: E501  (exact error lines)
"""Size attacks on the configuration: alias bombs, oversize files, deep nesting, huge error
lists. Each is refused with one clear error before anything large is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from config_testlib import dump, fs_doc, pl_doc

from gateway.apfconfig.configset import ConfigErrors, ConfigLimits
from gateway.apfconfig.loader import load_paths, load_text

FS_HEAD = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: x}\n"


def bomb(levels: int) -> str:
    """Billion laughs: each level is nine aliases of the one before."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return FS_HEAD + "\n".join(lines) + f"\nspec: {{rules: *l{levels - 1}}}\n"


def refused(text: str, source: str = "c.yaml", limits: ConfigLimits | None = None) -> ConfigErrors:
    with pytest.raises(ConfigErrors) as exc:
        load_text(text, source=source, **({"limits": limits} if limits else {}))
    return exc.value


def test_the_486_byte_alias_bomb_is_refused_before_expanding() -> None:
    text = bomb(9)  # 9**9 = 387 million "lol"s once expanded
    assert len(text) < 600
    err = refused(text)
    assert [str(e) for e in err.errors] == [
        "c.yaml: document 1: larger than 2097152 bytes (maxConfigBytes) with YAML aliases expanded, each value counting 8 bytes besides its text"
    ]
    assert err.reason == "too_large"


def test_a_smaller_bomb_no_longer_floods_the_error_output() -> None:
    # 9**5 values once expanded: within the size limit, so it is validated; it used to print
    # every rule's whole value (megabytes), now each value is cut short.
    err = refused(bomb(5))
    assert len(str(err)) < 20_000
    assert "more characters)" in str(err)


def test_aliases_within_the_limit_still_work() -> None:
    text = (
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: a}\n"
        "spec:\n  priorityLevelConfiguration: {name: p}\n  rules:\n"
        "  - subjects: &who [{kind: Group, group: {name: dev}}]\n"
        "    nonResourceRules: [{verbs: ['*'], nonResourceURLs: ['/a/*']}]\n"
        "  - subjects: *who\n    nonResourceRules: [{verbs: ['*'], nonResourceURLs: ['/b/*']}]\n"
    )
    (fs,) = load_text(text).flow_schemas
    assert fs.spec.rules[0].subjects == fs.spec.rules[1].subjects


def test_a_recursive_alias_is_refused() -> None:
    err = refused(FS_HEAD + "spec: &s {rules: [*s]}\n")
    assert [str(e) for e in err.errors] == ["c.yaml: document 1: recursive alias *s"]


def test_an_oversize_file_is_refused_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    # Valid YAML: a 3 MiB comment and one good object. Only max_bytes + 1 bytes are read.
    f.write_text("#" + "x" * (3 << 20) + "\n" + dump(pl_doc("p")))
    with pytest.raises(ConfigErrors) as exc:
        load_paths([f])
    assert [str(e) for e in exc.value.errors] == [
        f"{f}: the configuration files together are larger than 2097152 bytes (maxConfigBytes)"
    ]
    # The limit is a setting.
    assert len(load_paths([f], ConfigLimits(max_bytes=4 << 20)).priority_levels) == 1


def test_the_size_limit_counts_all_files_together(tmp_path: Path) -> None:
    for name in ("a", "b"):  # mostly comment: the bytes read are what counts here
        (tmp_path / f"{name}.yaml").write_text("#" + "x" * 5000 + "\n" + dump(pl_doc(name)))
    size = (tmp_path / "a.yaml").stat().st_size
    limits = ConfigLimits(max_bytes=size + size // 2)
    with pytest.raises(ConfigErrors) as exc:
        load_paths([tmp_path], limits)
    assert [e.file for e in exc.value.errors] == [str(tmp_path / "b.yaml")]


def test_too_many_objects_are_refused() -> None:
    text = dump(*(pl_doc(f"p{i}") for i in range(6)))
    err = refused(text, limits=ConfigLimits(max_objects=5))
    assert [str(e) for e in err.errors] == ["c.yaml: 6 objects, more than 5 (maxConfigObjects)"]
    items = {"apiVersion": "v1", "kind": "List", "items": [pl_doc(f"p{i}") for i in range(5)]}
    err = refused(dump(items), limits=ConfigLimits(max_objects=5))  # the List counts too
    assert err.reason == "too_large"


@pytest.mark.parametrize("source", ["deep.json", "deep.yaml"])
def test_deep_nesting_is_a_config_error_not_a_recursion_error(source: str) -> None:
    for depth in (150, 100_000):
        text = '{"kind": ' + "[" * depth + "]" * depth + "}"
        err = refused(text, source)
        assert len(err.errors) == 1
        message = err.errors[0].message
        # libyaml stops at 1000 levels itself
        assert message == "nested more than 100 levels deep" or (
            message.startswith("invalid YAML") and "exceeded maximum nesting depth" in message
        ), message


def test_the_error_list_is_capped_and_the_rest_counted() -> None:
    docs = [fs_doc(f"Bad{i}") for i in range(30)]  # one error each: the name
    err = refused(dump(*docs), limits=ConfigLimits(max_errors=7))
    assert len(err.errors) == 7 and err.more == 23
    assert [e.name for e in err.errors] == [f"Bad{i}" for i in range(7)]
    assert str(err).splitlines()[-1] == "... and 23 more errors"


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    for text in ("", "\n", "# nothing yet\n", "---\n"):
        f = tmp_path / "flow.yaml"
        f.write_text(text)
        with pytest.raises(ConfigErrors) as exc:
            load_paths([f])
        assert [str(e) for e in exc.value.errors] == [
            f"{f}: holds no documents; an empty (or half-written) file is refused"
        ]
        assert exc.value.reason == "empty"


def test_json_counts_against_the_size_limit_too() -> None:
    value = {"kind": "List", "apiVersion": "v1", "items": [1] * 2000}
    err = refused(json.dumps(value), "x.json", ConfigLimits(max_bytes=10_000))
    assert err.reason == "too_large"
    assert yaml.safe_load(json.dumps(value)) == value  # the same text is fine YAML-wise
