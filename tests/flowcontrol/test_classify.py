"""Classification (Kubernetes' match_test.go and apf_controller.go): rule matching per dimension,
matching order, fallback, dangling schemas, the bootstrap defaults and flow hashing."""

from __future__ import annotations

import hashlib

import pytest

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.classify import (
    flow_schema_matches,
    non_resource_url_matches,
    subject_matches,
)
from gateway.flowcontrol.controller import FlowController, SimpleObjectSet, flow_hash
from gateway.flowcontrol.digest import RequestDigest, UserInfo
from gateway.flowcontrol.objects import (
    DistinguisherMethod,
    NonResourcePolicyRule,
    ResourcePolicyRule,
    Subject,
)
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import (
    flow_schema,
    group,
    non_resource_request,
    queuing_level,
    reject_level,
    resource_request,
    rule,
    service_account,
    user,
)

AUTH = ("system:authenticated",)


def _res(
    subject: Subject,
    *,
    verbs: tuple[str, ...] = ("*",),
    api_groups: tuple[str, ...] = ("*",),
    resources: tuple[str, ...] = ("*",),
    cluster_scope: bool = False,
    namespaces: tuple[str, ...] = ("*",),
) -> bool:
    """Whether a one-rule schema with this resource rule matches ``REQ``."""
    fs = flow_schema(
        "fs",
        "pl",
        rule(
            subject,
            resource_rules=(
                ResourcePolicyRule(verbs, api_groups, resources, cluster_scope, namespaces),
            ),
            non_resource_rules=(),
        ),
    )
    return flow_schema_matches(fs, REQ)


REQ = resource_request(
    "alice", ("g1", *AUTH), verb="get", api_group="apps", resource="deployments", namespace="ns1"
)


# ---------------------------------------------------------------- subjects
@pytest.mark.parametrize(
    ("subject", "who", "expected"),
    [
        (user("alice"), UserInfo("alice"), True),
        (user("alice"), UserInfo("bob"), False),
        (user("alice"), UserInfo("alice2"), False),
        (user("*"), UserInfo("anyone"), True),
        (group("g1"), UserInfo("x", ("g0", "g1")), True),
        (group("g1"), UserInfo("x", ("g10",)), False),
        (group("g1"), UserInfo("g1"), False),  # a user name is not a group
        (group("*"), UserInfo("x"), True),  # even with no groups at all
        (
            service_account("kube-system", "foo"),
            UserInfo("system:serviceaccount:kube-system:foo"),
            True,
        ),
        (
            service_account("kube-system", "foo"),
            UserInfo("system:serviceaccount:kube-system:foobar"),
            False,
        ),
        (
            service_account("kube-system", "foo"),
            UserInfo("system:serviceaccount:default:foo"),
            False,
        ),
        (service_account("kube-system", "foo"), UserInfo("kube-system:foo"), False),
        (
            service_account("kube-system", "*"),
            UserInfo("system:serviceaccount:kube-system:any"),
            True,
        ),
        (
            service_account("kube-system", "*"),
            UserInfo("system:serviceaccount:kube-systemx:a"),
            False,
        ),
        (service_account("kube-system", "*"), UserInfo("system:serviceaccount:kube-system"), False),
        (
            service_account("kube-system", "*"),
            UserInfo("system:serviceaccounts:kube-system:a"),
            False,
        ),
    ],
)
def test_subject_literals(subject: Subject, who: UserInfo, expected: bool) -> None:
    assert subject_matches(subject, who) is expected


# ---------------------------------------------------------------- resource rules
def test_resource_rule_dimensions() -> None:
    alice = user("alice")
    assert _res(alice)
    assert not _res(user("bob"))
    # verb
    assert _res(alice, verbs=("get",))
    assert not _res(alice, verbs=("list", "watch"))
    # apiGroup
    assert _res(alice, api_groups=("apps",))
    assert not _res(alice, api_groups=("",))
    assert not _res(alice, api_groups=("apps.example",))
    # resource
    assert _res(alice, resources=("deployments",))
    assert not _res(alice, resources=("pods",))
    assert not _res(alice, resources=("deployments/status",))
    # namespace
    assert _res(alice, namespaces=("ns1",))
    assert not _res(alice, namespaces=("ns2",))
    assert not _res(alice, namespaces=())


def test_wildcard_only_when_alone() -> None:
    # A "*" mixed with other entries (which validation forbids) is matched only literally.
    assert not _res(user("alice"), verbs=("*", "list"))
    assert not _res(user("alice"), resources=("pods", "*"))


def test_subresource_joins_resource() -> None:
    req = resource_request(resource="pods", subresource="status", namespace="ns1")
    rules = [
        (("pods/status",), True),
        (("pods",), False),
        (("pods/*",), False),  # no partial wildcards
        (("*",), True),
    ]
    for resources, expected in rules:
        fs = flow_schema(
            "fs",
            "pl",
            rule(
                group("*"),
                resource_rules=(ResourcePolicyRule(("*",), ("*",), resources, False, ("*",)),),
                non_resource_rules=(),
            ),
        )
        assert flow_schema_matches(fs, req) is expected, resources


@pytest.mark.parametrize(
    ("namespace", "cluster_scope", "namespaces", "expected"),
    [
        ("", False, ("*",), False),  # namespaces "*" never matches cluster-scoped requests
        ("", True, ("*",), True),
        ("", True, (), True),
        ("ns1", True, (), False),  # clusterScope says nothing about namespaced requests
        ("ns1", False, ("*",), True),
        ("ns1", True, ("ns1",), True),
    ],
)
def test_cluster_scope(
    namespace: str, cluster_scope: bool, namespaces: tuple[str, ...], expected: bool
) -> None:
    req = resource_request(resource="nodes", namespace=namespace)
    fs = flow_schema(
        "fs",
        "pl",
        rule(
            group("*"),
            resource_rules=(ResourcePolicyRule(("*",), ("*",), ("*",), cluster_scope, namespaces),),
            non_resource_rules=(),
        ),
    )
    assert flow_schema_matches(fs, req) is expected


# ---------------------------------------------------------------- non-resource rules
@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("/healthz", "/healthz", True),
        ("/healthz", "/healthz/etcd", True),  # the prefix always ends in "/"
        ("/healthz", "/healthzx", False),
        ("/healthz", "/", False),
        ("/healthz/*", "/healthz/etcd", True),
        ("/healthz/*", "/healthz", False),
        ("/healthz/*", "/healthz/", True),
        ("/apis/", "/apis/", True),
        ("/apis/", "/apis/apps/v1", True),
        ("/apis/", "/apis", False),
        ("/apis/*", "/apis/apps", True),
        ("*", "/anything/at/all", True),
        ("*", "/", True),
        ("/metrics", "/metrics", True),
        ("/metrics", "/metricsx/y", False),
    ],
)
def test_non_resource_urls(pattern: str, path: str, expected: bool) -> None:
    assert non_resource_url_matches(pattern, path) is expected
    fs = flow_schema(
        "fs",
        "pl",
        rule(
            group("*"),
            resource_rules=(),
            non_resource_rules=(NonResourcePolicyRule(("get",), (pattern,)),),
        ),
    )
    assert flow_schema_matches(fs, non_resource_request(path)) is expected
    assert not flow_schema_matches(fs, non_resource_request(path, verb="post"))


def test_resource_and_non_resource_rules_do_not_cross() -> None:
    only_resources = flow_schema("fs", "pl", rule(group("*"), non_resource_rules=()))
    only_urls = flow_schema("fs", "pl", rule(group("*"), resource_rules=()))
    assert flow_schema_matches(only_resources, REQ)
    assert not flow_schema_matches(only_resources, non_resource_request("/healthz"))
    assert not flow_schema_matches(only_urls, REQ)
    assert flow_schema_matches(only_urls, non_resource_request("/healthz"))


def test_any_rule_and_any_subject() -> None:
    fs = flow_schema(
        "fs",
        "pl",
        rule(user("nobody"), non_resource_rules=()),
        rule(user("bob"), group("g1"), non_resource_rules=()),
    )
    assert flow_schema_matches(fs, REQ)  # second rule, second subject
    assert not flow_schema_matches(fs, resource_request("carol", AUTH))


# ---------------------------------------------------------------- order and fallback
def _controller(*schemas: object, levels: tuple[object, ...] = ()) -> FlowController:
    config = SimpleObjectSet(
        tuple(schemas),  # type: ignore[arg-type]
        tuple(levels) or (queuing_level("pl"), queuing_level("other")),  # type: ignore[arg-type]
    )
    return FlowController(clock=FakeEventClock(), config=config, mandatory=bootstrap.mandatory())


def test_precedence_then_name() -> None:
    everyone = rule(group("*"))
    c = _controller(
        flow_schema("zeta", "pl", everyone, precedence=500),
        flow_schema("beta", "other", everyone, precedence=500),
        flow_schema("alpha", "pl", everyone, precedence=700),
    )
    assert [fs.name for fs in c.flow_schemas] == ["exempt", "beta", "zeta", "alpha", "catch-all"]
    got = c.classify(REQ)
    assert (got.flow_schema, got.priority_level) == ("beta", "other")


def test_first_match_wins_and_fallback_to_catch_all() -> None:
    c = _controller(
        flow_schema("for-bob", "other", rule(user("bob")), precedence=100),
        flow_schema("for-authenticated", "pl", rule(group("system:authenticated")), precedence=200),
    )
    assert c.classify(resource_request("bob", AUTH)).flow_schema == "for-bob"
    assert c.classify(resource_request("carol", AUTH)).flow_schema == "for-authenticated"
    # In neither system:authenticated nor system:unauthenticated: nothing matches.
    odd = c.classify(resource_request("carol", ()))
    assert (odd.flow_schema, odd.priority_level) == ("catch-all", "catch-all")
    masters = c.classify(resource_request("root", ("system:masters",)))
    assert (masters.flow_schema, masters.priority_level, masters.exempt) == (
        "exempt",
        "exempt",
        True,
    )


def test_dangling_flow_schema_is_dropped() -> None:
    c = _controller(
        flow_schema("dangling", "missing-level", rule(group("*")), precedence=10),
        flow_schema("good", "pl", rule(group("*")), precedence=20),
    )
    assert c.dangling == [("dangling", "missing-level")]
    assert "dangling" not in [fs.name for fs in c.flow_schemas]
    assert c.classify(REQ).flow_schema == "good"


def test_cache_does_not_leak_between_users() -> None:
    c = _controller(flow_schema("for-bob", "other", rule(user("bob")), precedence=100))
    assert c.classify(resource_request("bob", AUTH)).flow_schema == "for-bob"
    assert c.classify(resource_request("carol", AUTH)).flow_schema == "catch-all"
    assert c.classify(resource_request("bob", AUTH)).flow_schema == "for-bob"


# ---------------------------------------------------------------- bootstrap defaults
@pytest.fixture(scope="module")
def defaults() -> FlowController:
    return FlowController(
        clock=FakeEventClock(), config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
    )


SA_GROUPS = ("system:serviceaccounts", "system:authenticated")


@pytest.mark.parametrize(
    ("digest", "schema", "level", "distinguisher"),
    [
        (non_resource_request("/healthz"), "probes", "exempt", ""),
        (
            non_resource_request("/readyz", "system:anonymous", ("system:unauthenticated",)),
            "probes",
            "exempt",
            "",
        ),
        (non_resource_request("/livez", verb="post"), "global-default", "global-default", "alice"),
        # "/healthz" also covers everything under "/healthz/" (the prefix quirk)
        (non_resource_request("/healthz/etcd"), "probes", "exempt", ""),
        (non_resource_request("/healthzz"), "global-default", "global-default", "alice"),
        (
            resource_request("root", ("system:masters", *AUTH), verb="delete"),
            "exempt",
            "exempt",
            "",
        ),
        (
            resource_request(
                "system:node:n1", ("system:nodes", *AUTH), resource="nodes", namespace=""
            ),
            "system-node-high",
            "node-high",
            "system:node:n1",
        ),
        (
            resource_request("system:node:n1", ("system:nodes", *AUTH), verb="list"),
            "system-nodes",
            "system",
            "system:node:n1",
        ),
        (
            resource_request(
                "system:kube-controller-manager",
                AUTH,
                verb="update",
                api_group="coordination.k8s.io",
                resource="leases",
                namespace="kube-system",
            ),
            "system-leader-election",
            "leader-election",
            "system:kube-controller-manager",
        ),
        (
            resource_request("system:kube-scheduler", AUTH, namespace="ns7"),
            "kube-scheduler",
            "workload-high",
            "ns7",
        ),
        (
            resource_request("system:serviceaccount:kube-system:foo", SA_GROUPS, namespace="ns3"),
            "kube-system-service-accounts",
            "workload-high",
            "ns3",
        ),
        (
            resource_request("system:serviceaccount:apps:bar", SA_GROUPS, namespace="apps"),
            "service-accounts",
            "workload-low",
            "system:serviceaccount:apps:bar",
        ),
        (resource_request("alice", AUTH), "global-default", "global-default", "alice"),
        (
            resource_request("system:anonymous", ("system:unauthenticated",)),
            "global-default",
            "global-default",
            "system:anonymous",
        ),
        (resource_request("nobody", ()), "catch-all", "catch-all", ""),
    ],
)
def test_bootstrap_classification(
    defaults: FlowController, digest: RequestDigest, schema: str, level: str, distinguisher: str
) -> None:
    got = defaults.classify(digest)
    assert (got.flow_schema, got.priority_level, got.distinguisher) == (
        schema,
        level,
        distinguisher,
    )
    if got.priority_level in ("exempt", "catch-all"):
        assert got.hash_value == 0  # no queues: no distinguisher, no hash
    else:
        assert got.hash_value == flow_hash(schema, distinguisher)
    assert got.exempt is (level == "exempt")


def test_by_namespace_cluster_scoped_is_empty(defaults: FlowController) -> None:
    got = defaults.classify(
        resource_request("system:kube-scheduler", AUTH, resource="nodes", namespace="")
    )
    assert (got.flow_schema, got.distinguisher) == ("kube-scheduler", "")
    assert got.hash_value == flow_hash("kube-scheduler", "")


# ---------------------------------------------------------------- flow hash
def test_flow_hash_is_sha256_prefix_little_endian() -> None:
    digest = hashlib.sha256(b"global-default\x00alice").digest()
    assert flow_hash("global-default", "alice") == int.from_bytes(digest[:8], "little")
    # pinned: a change of encoding, separator or byte order changes this value
    assert flow_hash("global-default", "alice") == PINNED_HASH
    assert flow_hash("global-default", "alice") != flow_hash("global-defaultalice", "")
    assert flow_hash("a", "b") == int.from_bytes(hashlib.sha256(b"a\0b").digest()[:8], "little")


PINNED_HASH = 17644606172554983095


@pytest.mark.parametrize("queues", [1, 2])
def test_hash_only_for_queue_levels_with_more_than_one_queue(queues: int) -> None:
    c = _controller(
        flow_schema("q", "pl", rule(user("alice")), distinguisher=DistinguisherMethod.BY_USER),
        flow_schema("r", "rej", rule(user("bob")), distinguisher=DistinguisherMethod.BY_USER),
        levels=(queuing_level("pl", queues=queues, hand_size=1), reject_level("rej")),
    )
    queued = c.classify(REQ)
    if queues == 1:
        assert (queued.distinguisher, queued.hash_value) == ("", 0)
    else:
        assert (queued.distinguisher, queued.hash_value) == ("alice", flow_hash("q", "alice"))
    rejecting = c.classify(resource_request("bob", AUTH))
    assert (rejecting.flow_schema, rejecting.distinguisher, rejecting.hash_value) == ("r", "", 0)
