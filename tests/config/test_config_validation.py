# ruff: noqa: E501  (tables of exact Kubernetes messages)
"""Every Kubernetes validation rule for FlowSchema and PriorityLevelConfiguration, with the exact
field path and message (cases follow ``pkg/apis/flowcontrol/validation/validation_test.go``)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from config_testlib import (
    ALL_NONRESOURCE,
    ALL_RESOURCES,
    V1BETA3,
    errors_of,
    fs_doc,
    load,
    pl_doc,
    queuing,
    rule,
)

from gateway.apfconfig import bootstrap
from gateway.apfconfig.serialize import fs_spec_to_dict

SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
VERBS = '"create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"'
R0 = "spec.rules[0]"
S0 = f"{R0}.subjects[0]"
RR0 = f"{R0}.resourceRules[0]"
NR0 = f"{R0}.nonResourceRules[0]"
Q = "spec.limited.limitResponse.queuing"


def _norm(lines: list[str]) -> list[str]:
    # The whole-spec value is printed as JSON; tests compare the rest of the line.
    return sorted(
        re.sub(r"^spec: Invalid value: \{.*\}: ", "spec: Invalid value: <spec>: ", x) for x in lines
    )


def _fixed_fs_spec(name: str) -> dict[str, Any]:
    fs = bootstrap.mandatory().flow_schema(name)
    assert fs is not None
    return fs_spec_to_dict(fs.spec)


def _with_url(spec: dict[str, Any], url: str) -> dict[str, Any]:
    spec["rules"][0]["nonResourceRules"][0]["nonResourceURLs"] = [url]
    return spec


SA_NOXU = {"kind": "ServiceAccount", "serviceAccount": {"namespace": "ns", "name": "noxu"}}

FLOW_SCHEMA_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("valid with wildcards", fs_doc(), []),
    (
        "missing both resource and non-resource rules",
        fs_doc(rules=[rule()]),
        [
            f"{R0}: Required value: at least one of resourceRules and nonResourceRules has to be non-empty"
        ],
    ),
    (
        "subject union malformed, ServiceAccount",
        fs_doc(
            rules=[
                rule(
                    subjects=[
                        {
                            "kind": "ServiceAccount",
                            "user": {"name": "fred"},
                            "group": {"name": "fred"},
                        }
                    ],
                    nonResourceRules=[ALL_NONRESOURCE],
                )
            ]
        ),
        [
            f"{S0}.serviceAccount: Required value: serviceAccount is required when subject kind is 'ServiceAccount'",
            f"{S0}.user: Forbidden: user is forbidden when subject kind is not 'User'",
            f"{S0}.group: Forbidden: group is forbidden when subject kind is not 'Group'",
        ],
    ),
    (
        "subject union malformed, User",
        fs_doc(
            rules=[
                rule(
                    subjects=[
                        {
                            "kind": "User",
                            "group": {"name": "fred"},
                            "serviceAccount": {"namespace": "s", "name": "n"},
                        }
                    ],
                    nonResourceRules=[ALL_NONRESOURCE],
                )
            ]
        ),
        [
            f"{S0}.serviceAccount: Forbidden: serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
            f"{S0}.user: Required value: user is required when subject kind is 'User'",
            f"{S0}.group: Forbidden: group is forbidden when subject kind is not 'Group'",
        ],
    ),
    (
        "subject union malformed, Group",
        fs_doc(
            rules=[
                rule(
                    subjects=[
                        {
                            "kind": "Group",
                            "user": {"name": "fred"},
                            "serviceAccount": {"namespace": "s", "name": "n"},
                        }
                    ],
                    nonResourceRules=[ALL_NONRESOURCE],
                )
            ]
        ),
        [
            f"{S0}.serviceAccount: Forbidden: serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
            f"{S0}.user: Forbidden: user is forbidden when subject kind is not 'User'",
            f"{S0}.group: Required value: group is required when subject kind is 'Group'",
        ],
    ),
    ("exempt flow schema with its fixed spec", fs_doc("exempt", **_fixed_fs_spec("exempt")), []),
    (
        "catch-all flow schema with its fixed spec",
        fs_doc("catch-all", **_fixed_fs_spec("catch-all")),
        [],
    ),
    (
        "exempt flow schema with another spec",
        fs_doc("exempt", **_with_url(_fixed_fs_spec("exempt"), "/")),
        ["spec: Invalid value: <spec>: spec of 'exempt' must equal the fixed value"],
    ),
    (
        "catch-all flow schema with another spec",
        fs_doc("catch-all", **_with_url(_fixed_fs_spec("catch-all"), "/")),
        ["spec: Invalid value: <spec>: spec of 'catch-all' must equal the fixed value"],
    ),
    (
        "matchingPrecedence 1 for a schema not named exempt",
        fs_doc("fred", matchingPrecedence=1, priorityLevelConfiguration={"name": "exempt"}),
        [
            "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1"
        ],
    ),
    (
        "matchingPrecedence above 10000",
        fs_doc(matchingPrecedence=10001),
        ["spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000"],
    ),
    (
        "matchingPrecedence negative",
        fs_doc(matchingPrecedence=-5),
        ["spec.matchingPrecedence: Invalid value: -5: must be a positive value"],
    ),
    ("matchingPrecedence 0 is defaulted", fs_doc(matchingPrecedence=0), []),
    (
        "wildcard mixed with verbs, api groups and resources",
        fs_doc(
            rules=[
                rule(
                    resourceRules=[
                        {
                            "verbs": ["*", "create"],
                            "apiGroups": ["*", "tak"],
                            "resources": ["*", "tok"],
                            "namespaces": ["*"],
                        }
                    ]
                )
            ]
        ),
        [
            f'{RR0}.verbs: Invalid value: []string{{"*", "create"}}: if \'*\' is present, must not specify other verbs',
            f'{RR0}.apiGroups: Invalid value: []string{{"*", "tak"}}: if \'*\' is present, must not specify other api groups',
            f'{RR0}.resources: Invalid value: []string{{"*", "tok"}}: if \'*\' is present, must not specify other resources',
        ],
    ),
    (
        "both resource and non-resource rules",
        fs_doc(
            rules=[
                rule(
                    resourceRules=[ALL_RESOURCES],
                    nonResourceRules=[{"verbs": ["*"], "nonResourceURLs": ["/apis/*"]}],
                )
            ]
        ),
        [],
    ),
    (
        "wildcard mixed with non-resource URLs",
        fs_doc(rules=[rule(nonResourceRules=[{"verbs": ["*"], "nonResourceURLs": ["*", "tik"]}])]),
        [
            f'{NR0}.nonResourceURLs: Invalid value: []string{{"*", "tik"}}: if \'*\' is present, must not specify other non-resource URLs'
        ],
    ),
    (
        "unknown subject kind",
        fs_doc(rules=[rule(subjects=[{"kind": "FooKind"}], nonResourceRules=[ALL_NONRESOURCE])]),
        [
            f'{S0}.kind: Unsupported value: "FooKind": supported values: "Group", "ServiceAccount", "User"'
        ],
    ),
    (
        "missing subject kind",
        fs_doc(rules=[rule(subjects=[{"kind": ""}], resourceRules=[ALL_RESOURCES])]),
        [f'{S0}.kind: Unsupported value: "": supported values: "Group", "ServiceAccount", "User"'],
    ),
    (
        "unsupported verb",
        fs_doc(rules=[rule(resourceRules=[{**ALL_RESOURCES, "verbs": ["feed"]}])]),
        [f'{RR0}.verbs: Unsupported value: []string{{"feed"}}: supported values: {VERBS}'],
    ),
    (
        "non-resource rule with an HTTP method as verb",
        fs_doc(rules=[rule(nonResourceRules=[{"verbs": ["post"], "nonResourceURLs": ["/x"]}])]),
        [f'{NR0}.verbs: Unsupported value: []string{{"post"}}: supported values: {VERBS}'],
    ),
    (
        "empty verbs",
        fs_doc(rules=[rule(resourceRules=[{**ALL_RESOURCES, "verbs": []}])]),
        [f"{RR0}.verbs: Required value: verbs must contain at least one value"],
    ),
    (
        "empty api groups and resources",
        fs_doc(rules=[rule(resourceRules=[{**ALL_RESOURCES, "apiGroups": [], "resources": []}])]),
        [
            f"{RR0}.apiGroups: Required value: resource rules must supply at least one api group",
            f"{RR0}.resources: Required value: resource rules must supply at least one resource",
        ],
    ),
    (
        "priority level name not a DNS subdomain",
        fs_doc(priorityLevelConfiguration={"name": "system+++$$"}),
        [f'spec.priorityLevelConfiguration.name: Invalid value: "system+++$$": {SUBDOMAIN}'],
    ),
    (
        "priority level name missing",
        fs_doc(priorityLevelConfiguration={}),
        ["spec.priorityLevelConfiguration.name: Required value: must reference a priority level"],
    ),
    (
        "service account without namespace",
        fs_doc(
            rules=[
                rule(
                    subjects=[{"kind": "ServiceAccount", "serviceAccount": {"name": "noxu"}}],
                    resourceRules=[ALL_RESOURCES],
                )
            ]
        ),
        [
            f"{S0}.serviceAccount.namespace: Required value: must specify namespace for service account"
        ],
    ),
    (
        "service account with bad namespace and name",
        fs_doc(
            rules=[
                rule(
                    subjects=[
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"namespace": "Kube_System", "name": "a b"},
                        }
                    ],
                    resourceRules=[ALL_RESOURCES],
                )
            ]
        ),
        [
            f'{S0}.serviceAccount.name: Invalid value: "a b": {SUBDOMAIN}',
            f'{S0}.serviceAccount.namespace: Invalid value: "Kube_System": {LABEL}',
        ],
    ),
    (
        "service account name * is allowed",
        fs_doc(
            rules=[
                rule(
                    subjects=[
                        {**SA_NOXU, "serviceAccount": {"namespace": "kube-system", "name": "*"}}
                    ],
                    resourceRules=[ALL_RESOURCES],
                )
            ]
        ),
        [],
    ),
    (
        "user without name",
        fs_doc(
            rules=[rule(subjects=[{"kind": "User", "user": {}}], resourceRules=[ALL_RESOURCES])]
        ),
        [f"{S0}.user.name: Required value"],
    ),
    (
        "group without name",
        fs_doc(
            rules=[
                rule(
                    subjects=[{"kind": "Group", "group": {"name": ""}}],
                    resourceRules=[ALL_RESOURCES],
                )
            ]
        ),
        [f"{S0}.group.name: Required value"],
    ),
    (
        "no subjects",
        fs_doc(rules=[rule(subjects=[], resourceRules=[ALL_RESOURCES])]),
        [f"{R0}.subjects: Required value: subjects must contain at least one value"],
    ),
    (
        "namespaces omitted without clusterScope",
        fs_doc(
            rules=[rule(resourceRules=[{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])]
        ),
        [
            f"{RR0}.namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace"
        ],
    ),
    (
        "clusterScope without namespaces",
        fs_doc(
            rules=[
                rule(
                    resourceRules=[
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                        }
                    ]
                )
            ]
        ),
        [],
    ),
    (
        "namespace * combined with a name",
        fs_doc(
            rules=[
                rule(
                    resourceRules=[
                        {**ALL_RESOURCES, "clusterScope": False, "namespaces": ["foo", "*"]}
                    ]
                )
            ]
        ),
        [
            f'{RR0}.namespaces: Invalid value: []string{{"foo", "*"}}: if \'*\' is present, must not specify other namespaces'
        ],
    ),
    (
        "namespace not a DNS label",
        fs_doc(rules=[rule(resourceRules=[{**ALL_RESOURCES, "namespaces": ["-foo"]}])]),
        [
            f"{RR0}.namespaces[0]: Invalid value: \"-foo\": each member of this list must be '*' or a DNS-1123 label; {LABEL}"
        ],
    ),
    (
        "unsupported distinguisher method",
        fs_doc(distinguisherMethod={"type": "ByFoo"}),
        [
            'spec.distinguisherMethod.type: Unsupported value: "ByFoo": supported values: "ByNamespace", "ByUser"'
        ],
    ),
    (
        "metadata name missing",
        {**fs_doc(), "metadata": {}},
        ["metadata.name: Required value: name or generateName is required"],
    ),
    (
        "metadata name not a DNS subdomain",
        fs_doc("Foo"),
        [f'metadata.name: Invalid value: "Foo": {SUBDOMAIN}'],
    ),
    (
        "metadata name too long",
        fs_doc("a" * 254),
        ['metadata.name: Invalid value: "' + "a" * 254 + '": must be no more than 253 characters'],
    ),
    (
        "metadata namespace on a cluster-scoped object",
        {**fs_doc(), "metadata": {"name": "x", "namespace": "ns"}},
        ["metadata.namespace: Forbidden: not allowed on this type"],
    ),
    (
        "status conditions: duplicate and empty types",
        {
            **fs_doc(),
            "status": {
                "conditions": [
                    {"type": "1", "status": "True"},
                    {"type": "1", "status": "True"},
                    {"type": "", "status": "x"},
                ]
            },
        },
        [
            'status.conditions[1].type: Duplicate value: "1"',
            "status.conditions[2].type: Required value: must not be empty",
        ],
    ),
]

URL_CASES = [
    ("", "must not be empty"),
    ("foo", "must start with slash"),
    ("/", ""),
    ("//", "must not contain double slash"),
    ("/foo", ""),
    ("/////", "must not contain double slash"),
    ("/apis/", ""),
    ("/healthz/*", ""),
    ("/healthz/*/foo", "wildcard can only do suffix matching"),
    ("/healthz/foo bar", "must not contain white-space"),
    ("/health*", "wildcard can only do suffix matching"),
    ("/health*/foo", "wildcard can only do suffix matching"),
    ("/*/*", "wildcard can only do suffix matching"),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in FLOW_SCHEMA_CASES], ids=[c[0] for c in FLOW_SCHEMA_CASES]
)
def test_flow_schema_validation(doc: dict[str, Any], expected: list[str]) -> None:
    assert _norm(errors_of(doc)) == sorted(expected)


@pytest.mark.parametrize(("url", "problem"), URL_CASES)
def test_non_resource_url_rules(url: str, problem: str) -> None:
    doc = fs_doc(rules=[rule(nonResourceRules=[{"verbs": ["get"], "nonResourceURLs": [url]}])])
    expected = [f'{NR0}.nonResourceURLs[0]: Invalid value: "{url}": {problem}'] if problem else []
    assert errors_of(doc) == expected


BAD_SPEC = {
    "type": "Limited",
    "limited": {"nominalConcurrencyShares": 42, "limitResponse": {"type": "Reject"}},
}

PRIORITY_LEVEL_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "exempt",
        pl_doc(
            "exempt",
            type="Exempt",
            limited=None,
            exempt={"nominalConcurrencyShares": 0, "lendablePercent": 0},
        ),
        [],
    ),
    ("exempt without the exempt field", pl_doc("exempt", type="Exempt", limited=None), []),
    (
        "admins may change spec.exempt of exempt",
        pl_doc(
            "exempt",
            type="Exempt",
            limited=None,
            exempt={"nominalConcurrencyShares": 10, "lendablePercent": 10},
        ),
        [],
    ),
    (
        "wrong exempt spec",
        pl_doc("exempt", **BAD_SPEC),
        [
            "spec.type: Invalid value: \"Limited\": type must be 'Exempt' if and only if name is 'exempt'",
            "spec: Invalid value: <spec>: spec of 'exempt' except the 'spec.exempt' field must equal the fixed value",
        ],
    ),
    (
        "exempt field values out of range (1)",
        pl_doc(
            "exempt",
            type="Exempt",
            limited=None,
            exempt={"nominalConcurrencyShares": -1, "lendablePercent": 101},
        ),
        [
            "spec.exempt.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
            "spec.exempt.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
        ],
    ),
    (
        "exempt field values out of range (2)",
        pl_doc(
            "exempt",
            type="Exempt",
            limited=None,
            exempt={"nominalConcurrencyShares": -1, "lendablePercent": -1},
        ),
        [
            "spec.exempt.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
            "spec.exempt.lendablePercent: Invalid value: -1: must be between 0 and 100, inclusive",
        ],
    ),
    (
        "exempt repurposed as Limited",
        pl_doc("exempt", exempt={}, **BAD_SPEC),
        [
            "spec.type: Invalid value: \"Limited\": type must be 'Exempt' if and only if name is 'exempt'",
            "spec.exempt: Forbidden: must be nil if the type is Limited",
            "spec: Invalid value: <spec>: spec of 'exempt' except the 'spec.exempt' field must equal the fixed value",
        ],
    ),
    (
        "exempt with a limited field",
        pl_doc("exempt", type="Exempt", exempt={}, limited=BAD_SPEC["limited"]),
        [
            "spec: Invalid value: <spec>: spec of 'exempt' except the 'spec.exempt' field must equal the fixed value",
            "spec.limited: Forbidden: must be nil if the type is not Limited",
        ],
    ),
    (
        "limited with an exempt field and no limited",
        pl_doc("broken-limited", exempt={}, limited=None),
        [
            "spec.exempt: Forbidden: must be nil if the type is Limited",
            "spec.limited: Required value: must not be empty when type is Limited",
        ],
    ),
    (
        "limited requires details",
        pl_doc("broken-limited", limited=None),
        ["spec.limited: Required value: must not be empty when type is Limited"],
    ),
    ("max-in-flight (Reject) works", pl_doc("max-in-flight", **BAD_SPEC), []),
    (
        "queuing forbidden when rejecting",
        pl_doc(
            limited={
                "nominalConcurrencyShares": 100,
                "limitResponse": {
                    "type": "Reject",
                    "queuing": {"queues": 512, "handSize": 4, "queueLengthLimit": 100},
                },
            }
        ),
        [
            "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited"
        ],
    ),
    (
        "wrong backstop spec",
        pl_doc("catch-all", **BAD_SPEC),
        ["spec: Invalid value: <spec>: spec of 'catch-all' must equal the fixed value"],
    ),
    (
        "backstop",
        pl_doc(
            "catch-all",
            limited={
                "nominalConcurrencyShares": 5,
                "lendablePercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        ),
        [],
    ),
    (
        "queuing required when queueing",
        pl_doc(limited={"nominalConcurrencyShares": 100, "limitResponse": {"type": "Queue"}}),
        [
            "spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is Limited"
        ],
    ),
    (
        "normal customized level",
        pl_doc(**queuing(queues=512, handSize=4, queueLengthLimit=100)),
        [],
    ),
    (
        "entropy: 512 queues, hand 8",
        pl_doc(**queuing(queues=512, handSize=8, queueLengthLimit=100)),
        [
            f"{Q}.handSize: Invalid value: 8: required entropy bits of deckSize 512 and handSize 8 should not be greater than 60"
        ],
    ),
    (
        "entropy: 128 queues, hand 10",
        pl_doc(**queuing(queues=128, handSize=10, queueLengthLimit=100)),
        [
            f"{Q}.handSize: Invalid value: 10: required entropy bits of deckSize 128 and handSize 10 should not be greater than 60"
        ],
    ),
    (
        "entropy: 2^31-1 queues, hand 3",
        pl_doc(**queuing(queues=2147483647, handSize=3, queueLengthLimit=100)),
        [
            f"{Q}.handSize: Invalid value: 3: required entropy bits of deckSize 2147483647 and handSize 3 should not be greater than 60",
            f"{Q}.queues: Invalid value: 2147483647: must not be greater than 10000000",
        ],
    ),
    (
        "10^7 queues with hand 2",
        pl_doc(**queuing(queues=10_000_000, handSize=2, queueLengthLimit=100)),
        [],
    ),
    (
        "hand greater than queues",
        pl_doc(**queuing(queues=7, handSize=8, queueLengthLimit=100)),
        [f"{Q}.handSize: Invalid value: 8: should not be greater than queues (7)"],
    ),
    (
        "hand 70 over default queues",
        pl_doc(**queuing(handSize=70)),
        [f"{Q}.handSize: Invalid value: 70: should not be greater than queues (64)"],
    ),
    (
        "negative queuing numbers",
        pl_doc(**queuing(queues=-1, handSize=-2, queueLengthLimit=-3)),
        [
            f"{Q}.queueLengthLimit: Invalid value: -3: must be positive",
            f"{Q}.queues: Invalid value: -1: must be positive",
            f"{Q}.handSize: Invalid value: -2: must be positive",
        ],
    ),
    (
        "round-trip annotation forbidden in v1",
        {
            **pl_doc("with-forbidden-annotation"),
            "metadata": {
                "name": "with-forbidden-annotation",
                "annotations": {"flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares": ""},
            },
        },
        [
            "metadata.annotations: Forbidden: annotation 'flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares' is forbidden"
        ],
    ),
    (
        "nominalConcurrencyShares 0 is a valid jail in v1",
        pl_doc(limited={"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}),
        [],
    ),
    (
        "negative nominalConcurrencyShares",
        pl_doc(limited={"nominalConcurrencyShares": -1, "limitResponse": {"type": "Reject"}}),
        [
            "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer"
        ],
    ),
    (
        "lendablePercent 101",
        pl_doc(limited={"lendablePercent": 101, "limitResponse": {"type": "Reject"}}),
        ["spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"],
    ),
    (
        "lendablePercent -1",
        pl_doc(limited={"lendablePercent": -1, "limitResponse": {"type": "Reject"}}),
        ["spec.limited.lendablePercent: Invalid value: -1: must be between 0 and 100, inclusive"],
    ),
    (
        "lendablePercent 100 and borrowingLimitPercent 0 and 250",
        pl_doc(
            limited={
                "lendablePercent": 100,
                "borrowingLimitPercent": 250,
                "limitResponse": {"type": "Reject"},
            }
        ),
        [],
    ),
    (
        "borrowingLimitPercent -1",
        pl_doc(limited={"borrowingLimitPercent": -1, "limitResponse": {"type": "Reject"}}),
        [
            "spec.limited.borrowingLimitPercent: Invalid value: -1: if specified, must be a non-negative integer"
        ],
    ),
    (
        "unknown type",
        pl_doc(type="Bogus"),
        ['spec.type: Unsupported value: "Bogus": supported values: "Exempt", "Limited"'],
    ),
    (
        "type Exempt for another name",
        pl_doc("not-exempt", type="Exempt", limited=None),
        [
            "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'"
        ],
    ),
    (
        "unknown limit response type",
        pl_doc(limited={"limitResponse": {"type": "Drop"}}),
        [
            'spec.limited.limitResponse.type: Unsupported value: "Drop": supported values: "Queue", "Reject"'
        ],
    ),
    (
        "missing limit response",
        pl_doc(limited={"nominalConcurrencyShares": 3}),
        [
            'spec.limited.limitResponse.type: Unsupported value: "": supported values: "Queue", "Reject"'
        ],
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [c[1:] for c in PRIORITY_LEVEL_CASES],
    ids=[c[0] for c in PRIORITY_LEVEL_CASES],
)
def test_priority_level_validation(doc: dict[str, Any], expected: list[str]) -> None:
    assert _norm(errors_of(doc)) == sorted(expected)


def test_v1beta3_preserve_zero_annotation_keeps_zero_and_is_dropped() -> None:
    doc = pl_doc(
        "jail",
        api=V1BETA3,
        limited={"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}},
    )
    doc["metadata"]["annotations"] = {
        "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares": ""
    }
    pl = load(doc).priority_levels[0]
    assert pl.spec.limited is not None
    assert pl.spec.limited.nominal_concurrency_shares == 0
    assert pl.metadata.annotations == ()


def test_v1beta3_zero_shares_without_annotation_means_default() -> None:
    doc = pl_doc(
        "x",
        api=V1BETA3,
        limited={"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}},
    )
    pl = load(doc).priority_levels[0]
    assert pl.spec.limited is not None
    assert pl.spec.limited.nominal_concurrency_shares == 30


def test_duplicate_names_in_the_input() -> None:
    errs = errors_of(fs_doc("a"), fs_doc("a"), pl_doc("a"))
    assert errs == ['metadata.name: Duplicate value: "a": also defined in test.yaml: document 1']


def test_all_errors_of_all_objects_are_collected() -> None:
    errs = errors_of(
        fs_doc("Bad", matchingPrecedence=-1), pl_doc("ok"), pl_doc(**queuing(handSize=70))
    )
    assert len(errs) == 3
