"""Kubernetes RequestInfo parsing (requestinfo.go) and route templates."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gateway.asgi.listoptions import SelectorError, exact_match
from gateway.asgi.requestinfo import RequestInfoError, RequestInfoParser, RouteTemplate
from tests.frontdoor.conftest import ServerThread, gateways, start_gateway
from tests.frontdoor.recording_upstream import RecordingUpstream, get, recorder

__all__ = ["gateways", "recorder"]

P = RequestInfoParser((RouteTemplate("/v2/{namespace}/items/{name}"),
                       RouteTemplate("/events/{namespace}", resource="events",
                                     long_running=True)))  # fmt: skip

CASES = [
    # method, path, query, verb, group, resource, subresource, namespace, name, long_running
    ("GET", "/api/v1/namespaces/foo", "", "get", "", "namespaces", "", "foo", "foo", False),
    ("GET", "/api/v1/namespaces", "", "list", "", "namespaces", "", "", "", False),
    ("GET", "/api/v1/pods", "watch=1", "watch", "", "pods", "", "", "", True),
    ("GET", "/api/v1/pods", "watch=true", "watch", "", "pods", "", "", "", True),
    ("GET", "/api/v1/watch/namespaces/ns/pods", "", "watch", "", "pods", "", "ns", "", True),
    ("GET", "/apis/apps/v1/namespaces/ns/deployments/d", "", "get", "apps", "deployments", "",
     "ns", "d", False),
    ("DELETE", "/apis/apps/v1/namespaces/ns/deployments", "", "deletecollection", "apps",
     "deployments", "", "ns", "", False),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", "", "delete", "", "pods", "", "ns", "p", False),
    ("POST", "/api/v1/namespaces/ns/pods", "", "create", "", "pods", "", "ns", "", False),
    ("PUT", "/api/v1/namespaces/ns/pods/p/status", "", "update", "", "pods", "status", "ns",
     "p", False),
    ("PATCH", "/api/v1/nodes/n1", "", "patch", "", "nodes", "", "", "n1", False),
    ("GET", "/api/v1/namespaces/ns/pods/p/log", "", "get", "", "pods", "log", "ns", "p", True),
    ("POST", "/api/v1/namespaces/ns/pods/p/exec", "", "create", "", "pods", "exec", "ns", "p",
     True),
    ("GET", "/api/v1/proxy/namespaces/ns/pods/p/x/y", "", "proxy", "", "pods", "", "ns", "p",
     True),
    ("GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dabc", "list", "",
     "pods", "", "ns", "abc", False),
    ("GET", "/v2/team-a/items", "", "list", "", "items", "", "team-a", "", False),
    ("PUT", "/v2/team-a/items/x", "", "update", "", "items", "", "team-a", "x", False),
    ("GET", "/events/team-a", "", "list", "", "events", "", "team-a", "", True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]} {c[1]}?{c[2]}" for c in CASES])
def test_resource_requests(case: tuple[object, ...]) -> None:
    method, path, query, verb, group, resource, sub, ns, name, lr = case
    info, long_running = P.parse(str(method), str(path), str(query).encode())
    assert info.is_resource_request
    got = (info.verb, info.api_group, info.resource, info.subresource, info.namespace, info.name)
    assert got == (verb, group, resource, sub, ns, name)
    assert long_running is lr


@pytest.mark.parametrize("path", ["/healthz", "/api", "/api/v1", "/apis/apps", "/metrics", "/"])
def test_non_resource_requests(path: str) -> None:
    info, long_running = P.parse("GET", path, b"")
    assert not info.is_resource_request
    assert info.verb == "get" and info.path == path and not long_running


@pytest.mark.parametrize(
    ("method", "path", "long_running"),
    [
        # BasicLongRunningRequestCheck: the profiler's paths, non-resource ones only.
        ("GET", "/debug/pprof/profile", True),
        ("GET", "/debug/pprof/", True),
        ("GET", "/debug/pprof/goroutine/x", True),
        ("GET", "/debug/pprof", False),
        ("GET", "/debug/flags/v", False),
        ("GET", "/debug/api_priority_and_fairness/dump_requests", False),
        # kube takes a non-resource request's verb from its method, so PROXY or WATCH would be
        # long-running there; here a method alone never bypasses APF (see requestinfo.py).
        ("PROXY", "/healthz", False),
        ("WATCH", "/metrics", False),
        ("proxy", "/anything", False),
        ("POST", "/debug/pprof/x", True),
    ],
)
def test_non_resource_long_running(method: str, path: str, long_running: bool) -> None:
    info, got = P.parse(method, path, b"")
    assert not info.is_resource_request
    assert got is long_running


def test_profiler_through_a_real_gateway_bypasses_flow_control(
    gateways: list[ServerThread], recorder: RecordingUpstream
) -> None:
    """No PF headers: the profiler's request was not classified."""
    gw = start_gateway({"upstreams": [{"url": recorder.url}]}, [])
    gateways.append(gw)
    assert _status_and_header(gw.port, "/debug/pprof/profile?seconds=1") == (200, "")
    status, flow_schema = _status_and_header(gw.port, "/debug/flags")
    assert status == 200 and flow_schema


# Taken from kube-apiserver's behaviour (requestinfo.go and its tests, ListOptions decoding,
# fields.ParseSelector): method, path, query -> verb, namespace, resource, subresource, name, parts.
KUBE = [
    ("GET", "/api/v1/namespaces", "", "list", "", "namespaces", "", "", ("namespaces",)),
    ("GET", "/api/v1/namespaces/other", "", "get", "other", "namespaces", "", "other",
     ("namespaces", "other")),
    ("HEAD", "/api/v1/pods", "", "list", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "", "proxy",
     "other", "pods", "", "foo", ("pods", "foo", "subpath", "not", "a", "subresource")),
    ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "", "get", "other", "pods",
     "proxy", "foo", ("pods", "foo", "proxy", "subpath")),
    ("PUT", "/api/v1/namespaces/other/finalize", "", "update", "other", "namespaces", "finalize",
     "other", ("namespaces", "other", "finalize")),
    ("DELETE", "/api/v1/nodes", "", "deletecollection", "", "nodes", "", "", ("nodes",)),
    ("OPTIONS", "/api/v1/pods", "", "", "", "pods", "", "", ("pods",)),
    # watch: present and not 0/false (any case) is a watch; only the first value counts
    ("GET", "/api/v1/pods", "watch", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=yes", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=00", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=TRUE", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "wat%63h=1", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=0", "list", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=FaLsE", "list", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=0&watch=1", "list", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=1&watch=0", "watch", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "watch=1;x", "list", "", "pods", "", "", ("pods",)),  # pair dropped
    ("GET", "/api/v1/pods", "watch=%zz", "list", "", "pods", "", "", ("pods",)),  # pair dropped
    ("GET", "/api/v1/pods/p", "watch=1", "get", "", "pods", "", "p", ("pods", "p")),
    # a name from fieldSelector: = or ==, valid path segment names only, first sorted term
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name==p", "list", "", "pods", "", "p",
     ("pods",)),
    ("GET", "/api/v1/pods", "watch=1&fieldSelector=metadata.name%3Dp", "watch", "", "pods", "",
     "p", ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name!=p", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=a/b", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=..", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=a%2525", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=b,metadata.name=a", "list", "", "pods",
     "", "a", ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=spec.x=1,metadata.name=p", "list", "", "pods", "",
     "p", ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=%20metadata.name=p", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=name1,foo&watch=true", "watch", "",
     "pods", "", "", ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name===p", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=a%5C,b", "list", "", "pods", "", "a,b",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=p&limit=x", "list", "", "pods", "", "",
     ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=p&limit=-5&timeoutSeconds=%2B3", "list",
     "", "pods", "", "p", ("pods",)),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar",
     "list", "", "pods", "", "foo", ("pods",)),
    ("DELETE", "/api/v1/pods", "fieldSelector=metadata.name=p", "deletecollection", "", "pods",
     "", "", ("pods",)),
    # a /watch/ prefix: the name comes from the path only, never from fieldSelector
    ("GET", "/apis/g/v/watch/resource", "fieldSelector=metadata.name=foo", "watch", "",
     "resource", "", "", ("resource",)),
    ("GET", "/apis/g/v/watch/resource/name", "fieldSelector=metadata.name=foo", "watch", "",
     "resource", "", "name", ("resource", "name")),
    ("GET", "/api/v1/watch/namespaces/ns/pods/p", "", "watch", "ns", "pods", "", "p",
     ("pods", "p")),
    # inner empty segments count (slashes are only trimmed at both ends)
    ("GET", "/api/v1/namespaces//pods", "", "list", "", "pods", "", "", ("pods",)),
    ("GET", "/api/v1/namespaces/ns//", "", "get", "ns", "namespaces", "", "ns",
     ("namespaces", "ns")),
    ("GET", "/api/v1/pods//x", "", "list", "", "pods", "x", "", ("pods", "", "x")),
    ("GET", "/api/v1/pods", "fieldSelector=metadata.name=p&timeoutSeconds=+3", "list", "",
     "pods", "", "", ("pods",)),  # "+" is a space in a query: not an integer
]  # fmt: skip


@pytest.mark.parametrize("case", KUBE, ids=[f"{c[0]} {c[1]}?{c[2]}" for c in KUBE])
def test_kube_apiserver_request_info(case: tuple[object, ...]) -> None:
    method, path, query, verb, ns, resource, sub, name, parts = case
    info, _ = RequestInfoParser().parse(str(method), str(path), str(query).encode())
    assert info.is_resource_request
    got = (info.verb, info.namespace, info.resource, info.subresource, info.name, info.parts)
    assert got == (verb, ns, resource, sub, name, parts)


@pytest.mark.parametrize(
    "path",
    ["/", "/api/version/", "/apis/group/version/", "/badprefix/version/resource",
     "/apis/version/resource", "/apis/extensions/v1beta1", "/api", "", "/api//"],
)  # fmt: skip
def test_kube_non_resource_paths(path: str) -> None:
    info, _ = RequestInfoParser().parse("GET", path, b"")
    assert not info.is_resource_request and info.verb == "get"


@pytest.mark.parametrize("path", ["/api/v1/watch", "/apis/g/v/proxy/", "/api/v1/proxy"])
def test_special_verb_without_resource_is_an_error(path: str) -> None:
    with pytest.raises(RequestInfoError, match="unable to determine kind and namespace"):
        RequestInfoParser().parse("GET", path, b"")


@pytest.mark.parametrize(
    ("selector", "name"),
    [("metadata.name!=a", ""), ("metadata.name==a", "a"), ("metadata.name=a", "a"),
     ("metadata.name!x=a", ""), ("x!=1,metadata.name=b", "b"), ("metadata.name=", ""),
     ("metadata.name=\\,a\\=b\\\\", ",a=b\\"), (",,metadata.name=c,", "c"), ("", "")],
)  # fmt: skip
def test_field_selector_exact_match(selector: str, name: str) -> None:
    assert exact_match(selector, "metadata.name") == name


def test_field_selector_errors() -> None:
    assert exact_match(r"a=1,metadata.name=x\\y", "metadata.name") == "x\\y"
    for bad in ["metadata.name=p,foo", "a=b=c", "a=b\\", "a=\\q"]:
        with pytest.raises(SelectorError):
            exact_match(bad, "metadata.name")


APF_WATCH = """
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: watches}
spec:
  type: Limited
  limited: {nominalConcurrencyShares: 5, limitResponse: {type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: watches}
spec:
  matchingPrecedence: 100
  priorityLevelConfiguration: {name: watches}
  rules:
  - subjects: [{kind: Group, group: {name: system:unauthenticated}}]
    resourceRules:
    - {verbs: [watch], apiGroups: [""], resources: [pods], namespaces: ["*"]}
"""


def test_watch_classification_through_a_real_gateway(
    recorder: RecordingUpstream, gateways: list[ServerThread], tmp_path: Path
) -> None:
    config = tmp_path / "apf.yaml"
    config.write_text(APF_WATCH)
    gw = start_gateway({"upstreams": [{"url": recorder.url}]}, [str(config)])
    gateways.append(gw)

    def flow_schema(query: str) -> str:
        status, head = _status_and_header(gw.port, "/api/v1/namespaces/ns/pods" + query)
        assert status == 200
        return head

    watch = flow_schema("?watch=true")
    assert flow_schema("?watch") == watch
    assert flow_schema("?watch=") == watch
    assert flow_schema("?watch=yes") == watch
    assert flow_schema("?watch=false") != watch
    assert flow_schema("?watch=0") != watch
    # The kube-apiserver error case never reaches the upstream.
    status, _ = get(gw.port, "/api/v1/watch")
    assert status == 500
    assert [r.target.count("watch") for r in recorder.received] == [1] * 6


def _status_and_header(port: int, target: str) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    found = [v.strip() for k, _, v in (h.partition(":") for h in head[1:])
             if k.lower() == "x-kubernetes-pf-flowschema-uid"]  # fmt: skip
    return int(head[0].split()[1]), found[0] if found else ""


@pytest.mark.parametrize(
    ("method", "long_running"),
    [("GET", False), ("PROXY", False), ("WATCH", False), ("proxy", False)],
)
def test_a_method_alone_never_makes_a_template_route_long_running(
    method: str, long_running: bool
) -> None:
    """A route template's request with an unknown method takes its verb from the method, as
    kube does; that verb does not make it long-running (which would bypass APF)."""
    info, got = P.parse(method, "/v2/ns/items/a", b"")
    assert info.is_resource_request
    assert got is long_running


def test_watch_query_on_a_template_route_is_long_running() -> None:
    info, got = P.parse("GET", "/v2/ns/items", b"watch=1")
    assert info.verb == "watch" and got is True
