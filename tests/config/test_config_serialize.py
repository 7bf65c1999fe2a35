"""serialize -> load is the identity on valid objects (property test), in camelCase v1 form."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import ConfigSet
from gateway.apfconfig.loader import load_text
from gateway.apfconfig.serialize import dump_yaml, to_dict
from gateway.apfconfig.validation import SUPPORTED_VERBS, required_entropy_bits
from gateway.flowcontrol.objects import (
    DistinguisherMethod,
    ExemptPriorityLevelConfiguration,
    FlowSchema,
    FlowSchemaCondition,
    FlowSchemaSpec,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    LimitResponseType,
    NonResourcePolicyRule,
    ObjectMeta,
    PolicyRulesWithSubjects,
    PriorityLevelConfiguration,
    PriorityLevelConfigurationSpec,
    PriorityLevelType,
    QueuingConfiguration,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
_ALNUM = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=5)
LABEL = st.builds(lambda a, b: f"{a}-{b}" if b else a, _ALNUM, st.none() | _ALNUM)
SUBDOMAIN = st.builds(".".join, st.lists(LABEL, min_size=1, max_size=3))
NAME = SUBDOMAIN.filter(lambda n: n not in ("exempt", "catch-all") and len(n) <= 253)


def wildcard_or(values: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.just(("*",)) | st.lists(values, min_size=1, max_size=3, unique=True).map(tuple)


META = st.builds(
    ObjectMeta,
    name=NAME,
    uid=TEXT,
    resource_version=st.integers(0, 10**6).map(str),
    generation=st.integers(0, 100),
    annotations=st.dictionaries(LABEL, TEXT, max_size=2).map(lambda d: tuple(d.items())),
    labels=st.dictionaries(LABEL, TEXT, max_size=2).map(lambda d: tuple(d.items())),
)
SUBJECT = (
    st.builds(Subject, st.just(SubjectKind.USER), TEXT.filter(bool))
    | st.builds(Subject, st.just(SubjectKind.GROUP), TEXT.filter(bool))
    | st.builds(Subject, st.just(SubjectKind.SERVICE_ACCOUNT), st.just("*") | SUBDOMAIN, LABEL)
)
VERBS = wildcard_or(st.sampled_from(SUPPORTED_VERBS))
RESOURCE_RULE = st.builds(
    lambda verbs, groups, resources, namespaces, cluster: ResourcePolicyRule(
        verbs, groups, resources, cluster or not namespaces, namespaces
    ),
    VERBS,
    wildcard_or(st.sampled_from(["", "apps", "coordination.k8s.io"])),
    wildcard_or(st.sampled_from(["pods", "pods/status", "leases", "nodes"])),
    st.just(()) | wildcard_or(LABEL),
    st.booleans(),
)
URL = st.sampled_from(["/", "/healthz", "/apis/", "/healthz/*", "/metrics"])
NONRESOURCE_RULE = st.builds(NonResourcePolicyRule, VERBS, wildcard_or(URL))
RULE = st.builds(
    PolicyRulesWithSubjects,
    st.lists(SUBJECT, min_size=1, max_size=3).map(tuple),
    st.lists(RESOURCE_RULE, max_size=2).map(tuple),
    st.lists(NONRESOURCE_RULE, max_size=2).map(tuple),
).filter(lambda r: bool(r.resource_rules or r.non_resource_rules))
CONDITION = st.builds(
    FlowSchemaCondition,
    LABEL,
    st.sampled_from(["True", "False"]),
    TEXT,
    TEXT,
    st.just("2026-01-02T03:04:05Z"),
)
FLOW_SCHEMA = st.builds(
    FlowSchema,
    META,
    st.builds(
        FlowSchemaSpec,
        SUBDOMAIN,
        st.integers(2, 10000),
        st.none() | st.sampled_from(list(DistinguisherMethod)),
        st.lists(RULE, max_size=3).map(tuple),
    ),
    st.lists(CONDITION, max_size=2, unique_by=lambda c: c.type).map(tuple),
)


@st.composite
def queuing(draw: st.DrawFn) -> QueuingConfiguration:
    queues = draw(st.integers(1, 4096))
    hand = draw(
        st.integers(1, min(queues, 16)).filter(lambda h: required_entropy_bits(queues, h) <= 60)
    )
    return QueuingConfiguration(queues, hand, draw(st.integers(1, 1000)))


LIMITED = st.builds(
    LimitedPriorityLevelConfiguration,
    st.integers(0, 1000),
    st.builds(LimitResponse, st.just(LimitResponseType.REJECT))
    | st.builds(LimitResponse, st.just(LimitResponseType.QUEUE), queuing()),
    st.integers(0, 100),
    st.none() | st.integers(0, 500),
)
PRIORITY_LEVEL = st.builds(
    PriorityLevelConfiguration,
    META,
    st.builds(PriorityLevelConfigurationSpec, st.just(PriorityLevelType.LIMITED), LIMITED),
)
EXEMPT = st.builds(
    lambda meta, exempt: PriorityLevelConfiguration(
        meta, PriorityLevelConfigurationSpec(PriorityLevelType.EXEMPT, exempt=exempt)
    ),
    META.map(
        lambda m: ObjectMeta("exempt", m.uid, m.resource_version, m.generation, m.annotations)
    ),
    st.none()
    | st.builds(ExemptPriorityLevelConfiguration, st.integers(0, 1000), st.integers(0, 100)),
)
CONFIG = st.builds(
    ConfigSet,
    st.lists(FLOW_SCHEMA, max_size=4, unique_by=lambda fs: fs.name).map(tuple),
    st.builds(
        lambda pls, exempt: tuple(pls) + tuple(exempt),
        st.lists(PRIORITY_LEVEL, max_size=4, unique_by=lambda pl: pl.name),
        st.lists(EXEMPT, max_size=1),
    ),
)


@settings(max_examples=100, deadline=None)
@given(CONFIG)
def test_dump_then_load_round_trips(config: ConfigSet) -> None:
    loaded = load_text(dump_yaml(config))
    assert loaded == config
    assert [fs.conditions for fs in loaded.flow_schemas] == [
        fs.conditions for fs in config.flow_schemas
    ]


def test_defaults_round_trip_and_wire_form() -> None:
    d = bootstrap.defaults()
    assert load_text(dump_yaml(d)) == d
    wire = to_dict(d.priority_levels[2])
    assert wire["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert wire["kind"] == "PriorityLevelConfiguration"
    assert wire["spec"]["limited"]["limitResponse"]["queuing"] == {
        "queues": 64,
        "handSize": 6,
        "queueLengthLimit": 50,
    }
    fs = to_dict(d.flow_schemas[0])
    assert fs["spec"]["priorityLevelConfiguration"] == {"name": "exempt"}
    assert fs["spec"]["rules"][0]["nonResourceRules"] == [
        {"verbs": ["*"], "nonResourceURLs": ["*"]}
    ]
    assert "status" not in fs
