"""What Kubernetes' configuration ensurer and status writer would make of a set of objects.

``ensure`` is one pass of ``pkg/registry/flowcontrol/ensurer`` applied to a ``ConfigSet``
instead of an API server: mandatory objects are always present with their fixed spec (PL
``exempt`` keeps its ``spec.exempt``) and ``apf.kubernetes.io/autoupdate-spec: "true"``;
suggested objects are created when absent and their spec follows the bootstrap value only when
the annotation parses as true (missing or unparsable: only at ``metadata.generation == 1``),
after which the annotation records that decision; other objects whose annotation parses as true
are removed. Files carry no generation, so by default an absent generation counts as 1.

``with_status`` writes the ``Dangling`` condition the APF config controller keeps on every
FlowSchema (``apf_controller.go presyncFlowSchemaStatus``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import ConfigSet
from gateway.flowcontrol.objects import (
    AUTOUPDATE_ANNOTATION,
    FlowSchema,
    FlowSchemaCondition,
    ObjectMeta,
    PriorityLevelConfiguration,
)

Obj = TypeVar("Obj", FlowSchema, PriorityLevelConfiguration)
DANGLING = "Dangling"

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: str | None) -> bool | None:
    """Go's ``strconv.ParseBool``; ``None`` when missing or unparsable."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def file_generation(obj: FlowSchema | PriorityLevelConfiguration) -> int:
    """Objects from files have no generation; treat them as never edited (generation 1)."""
    return obj.metadata.generation or 1


@dataclass(frozen=True, slots=True)
class EnsureResult:
    config: ConfigSet
    changes: list[str] = field(default_factory=list)


def ensure(
    live: ConfigSet,
    *,
    generation_of: Callable[[FlowSchema | PriorityLevelConfiguration], int] = file_generation,
) -> EnsureResult:
    mandatory, suggested = bootstrap.mandatory(), bootstrap.suggested()
    changes: list[str] = []

    def one_kind(
        kind: str, objs: tuple[Obj, ...], mand: tuple[Obj, ...], sugg: tuple[Obj, ...]
    ) -> tuple[Obj, ...]:
        boot_m = {o.name: o for o in mand}
        boot_s = {o.name: o for o in sugg}
        out: list[Obj] = []
        for obj in objs:
            boot = boot_m.get(obj.name) or boot_s.get(obj.name)
            if boot is None:
                if parse_bool(obj.metadata.annotation(AUTOUPDATE_ANNOTATION)) is True:
                    changes.append(
                        f'removed {kind} "{obj.name}": not a bootstrap object and '
                        f'{AUTOUPDATE_ANNOTATION} is "true"'
                    )
                    continue
                out.append(obj)
                continue
            always = obj.name in boot_m
            out.append(_ensure_one(kind, obj, boot, always, generation_of, changes))
        have = {o.name for o in objs}
        for wanted in mand + sugg:
            if wanted.name not in have:
                what = "mandatory" if wanted.name in boot_m else "suggested"
                changes.append(f'created {kind} "{wanted.name}" ({what} object was missing)')
                out.append(wanted)
        return tuple(out)

    pls = one_kind(
        "PriorityLevelConfiguration",
        live.priority_levels,
        mandatory.priority_levels,
        suggested.priority_levels,
    )
    fss = one_kind("FlowSchema", live.flow_schemas, mandatory.flow_schemas, suggested.flow_schemas)
    return EnsureResult(ConfigSet(fss, pls), changes)


def _ensure_one(
    kind: str,
    current: Obj,
    boot: Obj,
    always: bool,
    generation_of: Callable[[FlowSchema | PriorityLevelConfiguration], int],
    changes: list[str],
) -> Obj:
    value = current.metadata.annotation(AUTOUPDATE_ANNOTATION)
    auto = always
    if not auto:
        parsed = parse_bool(value)
        auto = parsed if parsed is not None else generation_of(current) == 1
    expected = boot.spec
    if (
        isinstance(current, PriorityLevelConfiguration)
        and isinstance(boot, PriorityLevelConfiguration)
        and current.name == "exempt"
        and current.spec.exempt is not None
    ):
        expected = replace(boot.spec, exempt=current.spec.exempt)
    result = current
    if auto and current.spec != expected:
        result = replace(result, spec=expected)
        changes.append(f'updated spec of {kind} "{current.name}" to the bootstrap value')
    if parse_bool(value) is not auto:
        text = "true" if auto else "false"
        result = replace(result, metadata=_with_annotation(result.metadata, text))
        changes.append(f'set {AUTOUPDATE_ANNOTATION}="{text}" on {kind} "{current.name}"')
    return result


def _with_annotation(meta: ObjectMeta, value: str) -> ObjectMeta:
    rest = tuple((k, v) for k, v in meta.annotations if k != AUTOUPDATE_ANNOTATION)
    return replace(meta, annotations=(*rest, (AUTOUPDATE_ANNOTATION, value)))


def dangling(config: ConfigSet) -> list[tuple[str, str]]:
    """(FlowSchema name, missing PriorityLevelConfiguration name) for each dangling reference."""
    return [
        (fs.name, fs.spec.priority_level_name)
        for fs in config.flow_schemas
        if config.priority_level(fs.spec.priority_level_name) is None
    ]


def dangling_warnings(config: ConfigSet) -> list[str]:
    return [
        f'warning: FlowSchema "{fs}" is dangling: PriorityLevelConfiguration "{pl}" does not '
        "exist, so the schema is ignored for classification"
        for fs, pl in dangling(config)
    ]


def dangling_condition(config: ConfigSet, fs: FlowSchema, now: str = "") -> FlowSchemaCondition:
    pl = fs.spec.priority_level_name
    if config.priority_level(pl) is not None:
        status, reason = "False", "Found"
        message = (
            f'This FlowSchema references the PriorityLevelConfiguration object named "{pl}" '
            "and it exists"
        )
    else:
        status, reason = "True", "NotFound"
        message = (
            f'This FlowSchema references the PriorityLevelConfiguration object named "{pl}" '
            "but there is no such object"
        )
    return FlowSchemaCondition(DANGLING, status, reason, message, now)


def with_status(config: ConfigSet, *, now: str = "") -> ConfigSet:
    """FlowSchemas with the controller's ``Dangling`` condition; an unchanged condition keeps its
    ``lastTransitionTime``, a changed one gets ``now`` (RFC 3339). Other conditions are kept."""
    out: list[FlowSchema] = []
    for fs in config.flow_schemas:
        want = dangling_condition(config, fs, now)
        old = next((c for c in fs.conditions if c.type == DANGLING), None)
        if old is not None and (old.status, old.reason, old.message) == (
            want.status,
            want.reason,
            want.message,
        ):
            out.append(fs)
            continue
        others = tuple(c for c in fs.conditions if c.type != DANGLING)
        out.append(replace(fs, conditions=(*others, want)))
    return replace(config, flow_schemas=tuple(out))


def effective_config(config: ConfigSet | None, *, exact: bool = False) -> ConfigSet:
    """What is served for the objects in the files (``None``: there are none): one ensurer
    pass, so missing suggested objects are added and mandatory ones kept. ``serve`` (start and
    every reload), ``config validate --effective`` and ``simulate`` all use this.

    ``exact`` (``flowControlObjects: exact``): the objects as written, plus the mandatory ones
    that are missing, which the APF controller would imagine anyway."""
    if not exact or config is None:
        return ensure(config if config is not None else ConfigSet()).config
    mandatory = bootstrap.mandatory()
    return ConfigSet(
        config.flow_schemas
        + tuple(o for o in mandatory.flow_schemas if config.flow_schema(o.name) is None),
        config.priority_levels
        + tuple(o for o in mandatory.priority_levels if config.priority_level(o.name) is None),
    )
