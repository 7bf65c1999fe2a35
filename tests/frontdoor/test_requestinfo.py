"""Kubernetes RequestInfo parsing (requestinfo.go) and route templates."""

from __future__ import annotations

import pytest

from gateway.asgi.requestinfo import RequestInfoParser, RouteTemplate

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
