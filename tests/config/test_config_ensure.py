# ruff: noqa: E501
"""ensure() does what Kubernetes' ensurer does (apf-reference.md 2.3); with_status() writes the
controller's Dangling condition."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from config_testlib import dump, pl_doc

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import ConfigSet
from gateway.apfconfig.ensure import dangling, ensure, parse_bool, with_status
from gateway.apfconfig.loader import load_paths
from gateway.flowcontrol.objects import (
    AUTOUPDATE_ANNOTATION,
    ExemptPriorityLevelConfiguration,
    FlowSchema,
    FlowSchemaCondition,
    FlowSchemaSpec,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    LimitResponseType,
    ObjectMeta,
    PriorityLevelConfiguration,
    PriorityLevelConfigurationSpec,
    PriorityLevelType,
)

KEY = AUTOUPDATE_ANNOTATION
JAIL = PriorityLevelConfigurationSpec(
    PriorityLevelType.LIMITED,
    LimitedPriorityLevelConfiguration(1, LimitResponse(LimitResponseType.REJECT)),
)


def boot_pl(name: str) -> PriorityLevelConfiguration:
    pl = bootstrap.defaults().priority_level(name)
    assert pl is not None
    return pl


def boot_fs(name: str) -> FlowSchema:
    fs = bootstrap.defaults().flow_schema(name)
    assert fs is not None
    return fs


def edited(
    obj: PriorityLevelConfiguration, annotation: str | None, generation: int = 0
) -> PriorityLevelConfiguration:
    anns = () if annotation is None else ((KEY, annotation),)
    return replace(
        obj, spec=JAIL, metadata=replace(obj.metadata, annotations=anns, generation=generation)
    )


def run(
    *pls: PriorityLevelConfiguration, fss: tuple[FlowSchema, ...] = ()
) -> tuple[ConfigSet, list[str]]:
    result = ensure(ConfigSet(fss, pls))
    return result.config, result.changes


def test_empty_input_gets_every_bootstrap_object() -> None:
    config, changes = run()
    d = bootstrap.defaults()
    assert set(config.flow_schemas) == set(d.flow_schemas)
    assert set(config.priority_levels) == set(d.priority_levels)
    assert len(changes) == len(d)
    assert (
        'created PriorityLevelConfiguration "catch-all" (mandatory object was missing)' in changes
    )
    assert 'created FlowSchema "global-default" (suggested object was missing)' in changes


def test_defaults_are_a_fixed_point() -> None:
    result = ensure(bootstrap.defaults())
    assert result.changes == []
    assert result.config == bootstrap.defaults()


def test_mandatory_spec_is_forced_and_annotation_forced_true() -> None:
    catch_all = edited(boot_pl("catch-all"), "false", generation=7)
    config, changes = run(catch_all)
    pl = config.priority_level("catch-all")
    assert pl is not None and pl.spec == boot_pl("catch-all").spec
    assert pl.metadata.annotation(KEY) == "true"
    assert (
        'updated spec of PriorityLevelConfiguration "catch-all" to the bootstrap value' in changes
    )
    assert f'set {KEY}="true" on PriorityLevelConfiguration "catch-all"' in changes


def test_mandatory_annotation_added_when_missing() -> None:
    fs = replace(boot_fs("exempt"), metadata=ObjectMeta("exempt"))
    config, changes = run(fss=(fs,))
    got = config.flow_schema("exempt")
    assert got is not None and got.metadata.annotation(KEY) == "true"
    assert changes.count(f'set {KEY}="true" on FlowSchema "exempt"') == 1


def test_exempt_priority_level_keeps_its_exempt_field() -> None:
    mine = ExemptPriorityLevelConfiguration(nominal_concurrency_shares=10, lendable_percent=20)
    exempt = replace(boot_pl("exempt"), spec=replace(boot_pl("exempt").spec, exempt=mine))
    config, changes = run(exempt)
    pl = config.priority_level("exempt")
    assert pl is not None and pl.spec.exempt == mine
    assert not any('PriorityLevelConfiguration "exempt"' in c for c in changes)


def test_exempt_priority_level_other_changes_are_reverted() -> None:
    exempt = replace(boot_pl("exempt"), spec=JAIL)
    config, _ = run(exempt)
    pl = config.priority_level("exempt")
    assert pl is not None and pl.spec == boot_pl("exempt").spec


@pytest.mark.parametrize(
    ("annotation", "generation", "auto", "written"),
    [
        ("true", 5, True, None),  # parses true: auto-update, annotation untouched
        ("True", 5, True, None),  # Go's ParseBool accepts it, so it is left as is
        ("1", 5, True, None),
        ("false", 1, False, None),  # parses false: hands off, even at generation 1
        ("F", 1, False, None),
        (None, 0, True, "true"),  # missing, no generation (a file): treated as generation 1
        (None, 1, True, "true"),
        (None, 2, False, "false"),  # missing and edited since creation: the admin owns it
        ("yes", 1, True, "true"),  # unparsable: decided by generation, then rewritten
        ("yes", 3, False, "false"),
    ],
)
def test_suggested_autoupdate_decision(
    annotation: str | None, generation: int, auto: bool, written: str | None
) -> None:
    config, changes = run(edited(boot_pl("workload-low"), annotation, generation))
    pl = config.priority_level("workload-low")
    assert pl is not None
    assert (pl.spec == boot_pl("workload-low").spec) is auto
    assert (pl.spec == JAIL) is (not auto)
    assert pl.metadata.annotation(KEY) == (written or annotation)
    spec_change = 'updated spec of PriorityLevelConfiguration "workload-low" to the bootstrap value'
    assert (spec_change in changes) is auto


def test_generation_of_is_used_for_the_decision() -> None:
    live = ConfigSet((), (edited(boot_pl("system"), None),))
    kept = ensure(live, generation_of=lambda _obj: 4).config.priority_level("system")
    assert kept is not None and kept.spec == JAIL and kept.metadata.annotation(KEY) == "false"


def test_suggested_flow_schema_is_updated_like_a_priority_level() -> None:
    fs = boot_fs("global-default")
    mine = replace(
        fs,
        spec=replace(fs.spec, matching_precedence=42),
        metadata=replace(fs.metadata, annotations=((KEY, "false"),)),
    )
    config, changes = run(fss=(mine,))
    got = config.flow_schema("global-default")
    assert got is not None and got.spec.matching_precedence == 42
    assert not any('FlowSchema "global-default"' in c for c in changes)


@pytest.mark.parametrize(
    ("annotation", "removed"),
    [("true", True), ("1", True), ("false", False), ("oui", False), (None, False)],
)
def test_non_bootstrap_objects_with_autoupdate_true_are_removed(
    annotation: str | None, removed: bool
) -> None:
    anns = () if annotation is None else ((KEY, annotation),)
    retired = PriorityLevelConfiguration(ObjectMeta("endpoint-controller", annotations=anns), JAIL)
    config, changes = run(retired)
    assert (config.priority_level("endpoint-controller") is None) is removed
    assert (
        any('removed PriorityLevelConfiguration "endpoint-controller"' in c for c in changes)
        is removed
    )


def test_parse_bool_is_go_strconv() -> None:
    for text in ("1", "t", "T", "TRUE", "true", "True"):
        assert parse_bool(text) is True
    for text in ("0", "f", "F", "FALSE", "false", "False"):
        assert parse_bool(text) is False
    for bad in (None, "", "yes", "tRUE", " true"):
        assert parse_bool(bad) is None


def _fs(name: str, pl: str, conditions: tuple[FlowSchemaCondition, ...] = ()) -> FlowSchema:
    return FlowSchema(ObjectMeta(name), FlowSchemaSpec(pl, 500), conditions)


def test_dangling_and_status_conditions() -> None:
    config = ConfigSet((_fs("a", "system"), _fs("b", "missing")), (boot_pl("system"),))
    assert dangling(config) == [("b", "missing")]
    out = with_status(config, now="2026-12-02T10:00:00Z")
    a, b = out.flow_schemas
    assert a.conditions == (
        FlowSchemaCondition(
            "Dangling", "False", "Found",
            'This FlowSchema references the PriorityLevelConfiguration object named "system" and it exists',
            "2026-12-02T10:00:00Z",
        ),
    )  # fmt: skip
    assert b.conditions == (
        FlowSchemaCondition(
            "Dangling", "True", "NotFound",
            'This FlowSchema references the PriorityLevelConfiguration object named "missing" but there is no such object',
            "2026-12-02T10:00:00Z",
        ),
    )  # fmt: skip


def test_status_is_only_rewritten_when_it_changes() -> None:
    other = FlowSchemaCondition("Other", "True")
    config = with_status(ConfigSet((_fs("a", "system", (other,)),), (boot_pl("system"),)), now="t1")
    again = with_status(config, now="t2")
    assert again.flow_schemas[0].conditions[1].last_transition_time == "t1"
    assert again.flow_schemas[0].conditions[0] == other
    gone = with_status(replace(config, priority_levels=()), now="t3")
    cond = gone.flow_schemas[0].conditions[-1]
    assert (cond.status, cond.reason, cond.last_transition_time) == ("True", "NotFound", "t3")


@pytest.mark.parametrize(("annotation", "kept"), [("false", True), ("true", False), (None, False)])
def test_file_redefining_a_suggested_level(
    tmp_path: Path, annotation: str | None, kept: bool
) -> None:
    doc = pl_doc(
        "global-default",
        limited={"nominalConcurrencyShares": 7, "limitResponse": {"type": "Reject"}},
    )
    if annotation is not None:
        doc["metadata"]["annotations"] = {KEY: annotation}
    (tmp_path / "mine.yaml").write_text(dump(doc))
    config = ensure(load_paths([tmp_path])).config
    pl = config.priority_level("global-default")
    assert pl is not None
    assert (pl.spec.limited is not None and pl.spec.limited.nominal_concurrency_shares == 7) is kept
    assert pl.metadata.annotation(KEY) == ("false" if kept else "true")
    assert len(config.priority_levels) == len(bootstrap.defaults().priority_levels)
