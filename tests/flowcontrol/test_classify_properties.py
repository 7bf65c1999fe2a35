"""Property: a generated FlowSchema matches requests built from its own rules, and rejects a
request that differs from such an example in one dimension the rule does not wildcard."""

from __future__ import annotations

import dataclasses

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.flowcontrol.classify import SERVICE_ACCOUNT_PREFIX, flow_schema_matches
from gateway.flowcontrol.digest import RequestDigest, RequestInfo, UserInfo
from gateway.flowcontrol.objects import (
    FlowSchema,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)
from tests.flowcontrol.builders import flow_schema
from tests.support.examples import examples

NAMES = ("alice", "bob", "system:kube-scheduler")
GROUPS = ("g1", "g2", "system:authenticated")
NAMESPACES = ("ns1", "kube-system", "default")
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
API_GROUPS = ("", "apps", "batch", "coordination.k8s.io")
RESOURCES = ("pods", "pods/status", "deployments", "nodes", "leases")
URLS = ("/healthz", "/metrics/*", "/apis/", "/version", "/openapi/*")
SEGMENTS = st.sampled_from(("a", "b", "v1", "x-y"))


def _list_or_all(values: tuple[str, ...]) -> st.SearchStrategy[tuple[str, ...]]:
    some = st.lists(st.sampled_from(values), min_size=1, max_size=3, unique=True).map(tuple)
    return st.one_of(st.just(("*",)), some)


subjects = st.one_of(
    st.builds(Subject, st.just(SubjectKind.USER), st.sampled_from((*NAMES, "*"))),
    st.builds(Subject, st.just(SubjectKind.GROUP), st.sampled_from((*GROUPS, "*"))),
    st.builds(
        Subject,
        st.just(SubjectKind.SERVICE_ACCOUNT),
        st.sampled_from(("sa1", "default", "*")),
        st.sampled_from(NAMESPACES),
    ),
)
resource_rules = st.builds(
    ResourcePolicyRule,
    _list_or_all(VERBS),
    _list_or_all(API_GROUPS),
    _list_or_all(RESOURCES),
    st.booleans(),
    st.one_of(st.just(()), _list_or_all(NAMESPACES)),
)
non_resource_rules = st.builds(NonResourcePolicyRule, _list_or_all(VERBS), _list_or_all(URLS))
schemas = st.builds(
    lambda subs, rr, nr: flow_schema(
        "generated", "pl", PolicyRulesWithSubjects(tuple(subs), (rr,), (nr,))
    ),
    st.lists(subjects, min_size=1, max_size=3),
    resource_rules,
    non_resource_rules,
)


def _pick(draw: st.DrawFn, values: tuple[str, ...], universe: tuple[str, ...]) -> str:
    return draw(st.sampled_from(universe if values == ("*",) else values))


def _user_for(draw: st.DrawFn, subject: Subject) -> UserInfo:
    if subject.kind is SubjectKind.USER:
        name = draw(st.sampled_from(NAMES)) if subject.name == "*" else subject.name
        return UserInfo(name, ("system:authenticated",))
    if subject.kind is SubjectKind.GROUP:
        g = draw(st.sampled_from(GROUPS)) if subject.name == "*" else subject.name
        return UserInfo("someone", (g,))
    sa = draw(st.sampled_from(("sa1", "other"))) if subject.name == "*" else subject.name
    return UserInfo(f"{SERVICE_ACCOUNT_PREFIX}{subject.namespace}:{sa}", ("system:authenticated",))


def _resource_example(draw: st.DrawFn, fs: FlowSchema) -> RequestDigest:
    rule = fs.spec.rules[0]
    rr = rule.resource_rules[0]
    choices = []
    if rr.namespaces:
        choices.append("namespaced")
    if rr.cluster_scope:
        choices.append("cluster")
    assume(choices)
    scope = draw(st.sampled_from(choices))
    namespace = _pick(draw, rr.namespaces, NAMESPACES) if scope == "namespaced" else ""
    resource, _, subresource = _pick(draw, rr.resources, RESOURCES).partition("/")
    info = RequestInfo(
        is_resource_request=True,
        path="/generated",
        verb=_pick(draw, rr.verbs, VERBS),
        api_group=_pick(draw, rr.api_groups, API_GROUPS),
        namespace=namespace,
        resource=resource,
        subresource=subresource,
    )
    return RequestDigest(_user_for(draw, draw(st.sampled_from(rule.subjects))), info)


def _path_for(draw: st.DrawFn, pattern: str) -> str:
    if pattern == "*":
        return "/" + draw(SEGMENTS)
    if pattern.endswith("*"):
        return pattern[:-1] + draw(SEGMENTS)
    if pattern.endswith("/"):
        return pattern + draw(st.sampled_from(("", "apps", "apps/v1")))
    return draw(st.sampled_from((pattern, f"{pattern}/{draw(SEGMENTS)}")))


def _non_resource_example(draw: st.DrawFn, fs: FlowSchema) -> RequestDigest:
    rule = fs.spec.rules[0]
    nr = rule.non_resource_rules[0]
    path = _path_for(draw, draw(st.sampled_from(nr.non_resource_urls)))
    info = RequestInfo(is_resource_request=False, path=path, verb=_pick(draw, nr.verbs, VERBS))
    return RequestDigest(_user_for(draw, draw(st.sampled_from(rule.subjects))), info)


@settings(max_examples=examples(200), deadline=None)
@given(schemas, st.data())
def test_matches_own_resource_examples(fs: FlowSchema, data: st.DataObject) -> None:
    example = data.draw(st.composite(lambda draw: _resource_example(draw, fs))())
    assert flow_schema_matches(fs, example)


@settings(max_examples=examples(200), deadline=None)
@given(schemas, st.data())
def test_matches_own_non_resource_examples(fs: FlowSchema, data: st.DataObject) -> None:
    example = data.draw(st.composite(lambda draw: _non_resource_example(draw, fs))())
    assert flow_schema_matches(fs, example)


def _counter_dimensions(fs: FlowSchema, resource: bool) -> list[str]:
    rule = fs.spec.rules[0]
    dims = []
    wild = any(s.name == "*" and s.kind is not SubjectKind.SERVICE_ACCOUNT for s in rule.subjects)
    if not wild:
        dims.append("subject")
    if resource:
        rr = rule.resource_rules[0]
        dims += [
            d
            for d, values in (
                ("verb", rr.verbs),
                ("api_group", rr.api_groups),
                ("resource", rr.resources),
                ("namespace", rr.namespaces),
            )
            if values != ("*",)
        ]
        if not rr.cluster_scope:
            dims.append("cluster")
    else:
        nr = rule.non_resource_rules[0]
        dims += [d for d, v in (("verb", nr.verbs), ("path", nr.non_resource_urls)) if v != ("*",)]
    return dims


def _counter(example: RequestDigest, dimension: str) -> RequestDigest:
    info = example.info
    if dimension == "subject":
        return dataclasses.replace(example, user=UserInfo("zz-nobody", ("zz-group",)))
    changes = {
        "verb": {"verb": "zz-verb"},
        "api_group": {"api_group": "zz.example"},
        "resource": {"resource": "zzresource", "subresource": ""},
        "namespace": {"namespace": "zz-ns"},
        "cluster": {"namespace": ""},
        "path": {"path": "/zz/path"},
    }[dimension]
    return dataclasses.replace(example, info=dataclasses.replace(info, **changes))  # type: ignore[arg-type]


@settings(max_examples=examples(200), deadline=None)
@given(schemas, st.booleans(), st.data())
def test_rejects_counter_examples(fs: FlowSchema, resource: bool, data: st.DataObject) -> None:
    build = _resource_example if resource else _non_resource_example
    example = data.draw(st.composite(lambda draw: build(draw, fs))())
    dims = _counter_dimensions(fs, resource)
    assume(dims)
    dimension = data.draw(st.sampled_from(dims))
    assert flow_schema_matches(fs, example)
    assert not flow_schema_matches(fs, _counter(example, dimension)), dimension
