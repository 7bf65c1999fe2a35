# ruff: noqa: E501  (reference tables)
"""The mandatory and suggested objects equal Kubernetes' (apf-reference.md tables 2.1 and 2.2)."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from gateway.apfconfig import bootstrap
from gateway.apfconfig.ensure import dangling
from gateway.apfconfig.loader import load_paths
from gateway.flowcontrol.objects import (
    AUTOUPDATE_ANNOTATION,
    DistinguisherMethod,
    NonResourcePolicyRule,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)

REPO = Path(__file__).resolve().parents[2]

# name: (type, NCS, lendable%, borrowingLimit%, limitResponse, queues, handSize, queueLengthLimit)
PRIORITY_LEVELS = {
    "exempt": ("Exempt", 0, 0, None, None, None, None, None),
    "catch-all": ("Limited", 5, 0, None, "Reject", None, None, None),
    "system": ("Limited", 30, 33, None, "Queue", 64, 6, 50),
    "node-high": ("Limited", 40, 25, None, "Queue", 64, 6, 50),
    "leader-election": ("Limited", 10, 0, None, "Queue", 16, 4, 50),
    "workload-high": ("Limited", 40, 50, None, "Queue", 128, 6, 50),
    "workload-low": ("Limited", 100, 90, None, "Queue", 128, 6, 50),
    "global-default": ("Limited", 20, 50, None, "Queue", 128, 6, 50),
}

ALL = ResourcePolicyRule(("*",), ("*",), ("*",), True, ("*",))
ALL_NON = NonResourcePolicyRule(("*",), ("*",))


def group(*names: str) -> tuple[Subject, ...]:
    return tuple(Subject(SubjectKind.GROUP, n) for n in names)


def user(*names: str) -> tuple[Subject, ...]:
    return tuple(Subject(SubjectKind.USER, n) for n in names)


KUBE_SYSTEM_SA = (Subject(SubjectKind.SERVICE_ACCOUNT, "*", "kube-system"),)
AUTH = group("system:unauthenticated", "system:authenticated")
BY_USER, BY_NS = DistinguisherMethod.BY_USER, DistinguisherMethod.BY_NAMESPACE

# (precedence, name, PL, distinguisher, subjects, resource rules, non-resource rules)
FLOW_SCHEMAS = [
    (1, "exempt", "exempt", None, group("system:masters"), (ALL,), (ALL_NON,)),
    (2, "probes", "exempt", None, AUTH, (), (NonResourcePolicyRule(("get",), ("/healthz", "/readyz", "/livez")),)),
    (
        100, "system-leader-election", "leader-election", BY_USER,
        user("system:kube-controller-manager", "system:kube-scheduler") + KUBE_SYSTEM_SA,
        (ResourcePolicyRule(("get", "create", "update"), ("coordination.k8s.io",), ("leases",), False, ("*",)),), (),
    ),
    (
        400, "system-node-high", "node-high", BY_USER, group("system:nodes"),
        (
            ResourcePolicyRule(("*",), ("",), ("nodes", "nodes/status"), True, ("*",)),
            ResourcePolicyRule(("*",), ("coordination.k8s.io",), ("leases",), False, ("*",)),
        ),
        (),
    ),
    (500, "system-nodes", "system", BY_USER, group("system:nodes"), (ALL,), (ALL_NON,)),
    (800, "kube-controller-manager", "workload-high", BY_NS, user("system:kube-controller-manager"), (ALL,), (ALL_NON,)),
    (800, "kube-scheduler", "workload-high", BY_NS, user("system:kube-scheduler"), (ALL,), (ALL_NON,)),
    (900, "kube-system-service-accounts", "workload-high", BY_NS, KUBE_SYSTEM_SA, (ALL,), (ALL_NON,)),
    (9000, "service-accounts", "workload-low", BY_USER, group("system:serviceaccounts"), (ALL,), (ALL_NON,)),
    (9900, "global-default", "global-default", BY_USER, AUTH, (ALL,), (ALL_NON,)),
    (10000, "catch-all", "catch-all", BY_USER, AUTH, (ALL,), (ALL_NON,)),
]  # fmt: skip


def test_mandatory_and_suggested_names() -> None:
    m, s = bootstrap.mandatory(), bootstrap.suggested()
    assert [p.name for p in m.priority_levels] == ["exempt", "catch-all"]
    assert [f.name for f in m.flow_schemas] == ["exempt", "catch-all"]
    assert {p.name for p in s.priority_levels} == set(PRIORITY_LEVELS) - {"exempt", "catch-all"}
    assert {f.name for f in s.flow_schemas} == {row[1] for row in FLOW_SCHEMAS} - {
        "exempt",
        "catch-all",
    }
    d = bootstrap.defaults()
    assert d.flow_schemas == m.flow_schemas + s.flow_schemas
    assert d.priority_levels == m.priority_levels + s.priority_levels


@pytest.mark.parametrize("name", list(PRIORITY_LEVELS))
def test_priority_level_values(name: str) -> None:
    pl = bootstrap.defaults().priority_level(name)
    assert pl is not None
    ptype, ncs, lendable, borrowing, response, queues, hand, qll = PRIORITY_LEVELS[name]
    assert str(pl.spec.type) == ptype
    if ptype == "Exempt":
        assert pl.spec.limited is None and pl.spec.exempt is not None
        assert (pl.spec.exempt.nominal_concurrency_shares, pl.spec.exempt.lendable_percent) == (
            ncs,
            lendable,
        )
        return
    lim = pl.spec.limited
    assert lim is not None and pl.spec.exempt is None
    assert (lim.nominal_concurrency_shares, lim.lendable_percent, lim.borrowing_limit_percent) == (
        ncs,
        lendable,
        borrowing,
    )
    assert str(lim.limit_response.type) == response
    q = lim.limit_response.queuing
    got = None if q is None else (q.queues, q.hand_size, q.queue_length_limit)
    assert got == (None if queues is None else (queues, hand, qll))


@pytest.mark.parametrize("row", FLOW_SCHEMAS, ids=[r[1] for r in FLOW_SCHEMAS])
def test_flow_schema_values(row: tuple[object, ...]) -> None:
    prec, name, pl, dm, subjects, res, nonres = row
    fs = bootstrap.defaults().flow_schema(str(name))
    assert fs is not None
    assert (
        fs.spec.matching_precedence,
        fs.spec.priority_level_name,
        fs.spec.distinguisher_method,
    ) == (prec, pl, dm)
    assert len(fs.spec.rules) == 1
    r = fs.spec.rules[0]
    assert (r.subjects, r.resource_rules, r.non_resource_rules) == (subjects, res, nonres)


def test_every_bootstrap_object_carries_the_autoupdate_annotation() -> None:
    d = bootstrap.defaults()
    for obj in (*d.flow_schemas, *d.priority_levels):
        assert obj.metadata.annotations == ((AUTOUPDATE_ANNOTATION, "true"),)


def test_defaults_have_no_dangling_reference() -> None:
    assert dangling(bootstrap.defaults()) == []


@pytest.mark.parametrize("file_name", [bootstrap.MANDATORY_FILE, bootstrap.SUGGESTED_FILE])
def test_package_data_and_config_folder_are_identical(file_name: str) -> None:
    shipped = resources.files("gateway.apfconfig.bootstrap").joinpath(file_name).read_bytes()
    assert (REPO / "config" / "flowcontrol" / file_name).read_bytes() == shipped


def test_package_data_is_declared_for_non_editable_installs() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert (
        "apfconfig/bootstrap/*.yaml" in pyproject["tool"]["setuptools"]["package-data"]["gateway"]
    )
    assert (REPO / "gateway" / "apfconfig" / "bootstrap" / "__init__.py").is_file()


def test_config_folder_validates_like_a_user_file() -> None:
    # Through the normal path, so the mandatory objects also pass the fixed-spec rule.
    assert load_paths([REPO / "config" / "flowcontrol"]) == bootstrap.defaults()
