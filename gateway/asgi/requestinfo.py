"""What a request asks for: Kubernetes ``RequestInfo`` from path, method and query.

Follows ``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``: the path is split on ``/``
after trimming slashes at both ends (inner empty segments count, as there);
``/api/{version}/...`` and ``/apis/{group}/{version}/...`` are resource requests, ``/watch/``
and ``/proxy/`` prefixes set the verb (and nothing after them is an error),
``namespaces/{ns}/{resource}`` sets the namespace, GET without a name is list or watch (with a
name from ``fieldSelector``; see ``listoptions``), DELETE without a name is deletecollection.
Route templates (``/v2/{namespace}/items/{name}``) describe non-Kubernetes APIs and are tried
first; anything else is a non-resource request. The front door hands this parser the canonical
path (``gateway.asgi.canonical``), so ``//`` and dot segments never reach it there.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.asgi.listoptions import Query, is_watch, parse_query, selected_name
from gateway.asgi.refusal import RequestRefused
from gateway.flowcontrol.digest import RequestInfo

API_PREFIXES = frozenset({"api", "apis"})
GROUPLESS_PREFIXES = frozenset({"api"})
SPECIAL_VERBS = frozenset({"proxy", "watch"})
# Special verbs whose paths have no subresource (everything after the name is proxied).
NO_SUBRESOURCE_VERBS = frozenset({"proxy"})
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# kube-apiserver's ``BasicLongRunningRequestCheck`` as its server config sets it up: these verbs,
# these subresources of resource requests, and non-resource paths under the profiler's prefix.
# One deliberate difference: kube takes a verb from any method (a non-resource request's verb is
# its lowercase method), so a request with the method PROXY or WATCH is long-running there and
# kube's own handlers then refuse the method. Behind a gateway the upstream may accept any
# method, and long-running requests bypass APF: a verb that only an unknown method gave never
# makes a request long-running here (docs/flowcontrol.md).
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
LONG_RUNNING_PATH_PREFIX = "/debug/pprof/"
# Query parameters kept in RequestInfo.query for work estimators.
KEPT_QUERY = frozenset(
    {
        "limit",
        "resourceVersion",
        "resourceVersionMatch",
        "labelSelector",
        "fieldSelector",
        "watch",
        "continue",
        "sendInitialEvents",
        "timeoutSeconds",
        "timeout",
    }
)


class RequestInfoError(RequestRefused):
    """kube-apiserver answers these paths with 500 before authenticating."""

    code = 500
    reason = "InternalError"
    prefix = "failed to create RequestInfo: "


@dataclass(frozen=True, slots=True)
class RouteTemplate:
    """``/v2/{namespace}/items/{name}``: literal segments must match; ``{namespace}``, ``{name}``
    and ``{subresource}`` fill those fields, other ``{x}`` match any segment. A template ending in
    ``{name}`` also matches the collection path without it. ``long_running`` marks streams (SSE)."""

    path: str
    resource: str = ""
    api_group: str = ""
    api_version: str = ""
    long_running: bool = False

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(s for s in self.path.strip("/").split("/") if s)

    def effective_resource(self) -> str:
        if self.resource:
            return self.resource
        literals = [s for s in self.segments if not s.startswith("{")]
        return literals[-1] if literals else ""

    def match(self, parts: list[str]) -> dict[str, str] | None:
        segs = self.segments
        if len(parts) == len(segs) - 1 and segs and segs[-1] == "{name}":
            segs = segs[:-1]
        if len(parts) != len(segs):
            return None
        found: dict[str, str] = {}
        for seg, part in zip(segs, parts, strict=True):
            if seg.startswith("{") and seg.endswith("}"):
                if not part:
                    return None
                found[seg[1:-1]] = part
            elif seg != part:
                return None
        return found


class RequestInfoParser:
    def __init__(self, templates: tuple[RouteTemplate, ...] = ()) -> None:
        self.templates = templates

    def parse(self, method: str, path: str, query_string: bytes) -> tuple[RequestInfo, bool]:
        """The request info and whether the request is long-running (watch, proxy, exec, ...).
        Raises ``RequestInfoError`` where kube-apiserver fails to build one."""
        # ASGI's ``path`` is already percent-decoded, as Go's ``URL.Path`` is.
        trimmed = path.strip("/")
        parts = trimmed.split("/") if trimmed else []
        for template in self.templates:
            found = template.match(parts)
            if found is not None:
                return self._from_template(template, found, method, path, query_string)
        if len(parts) < 3 or parts[0] not in API_PREFIXES:
            return _non_resource(method, path)
        return self._kubernetes(parts, method, path, query_string)

    def _kubernetes(
        self, parts: list[str], method: str, path: str, query_string: bytes
    ) -> tuple[RequestInfo, bool]:
        prefix = parts[0]
        rest = parts[1:]
        group = ""
        if prefix not in GROUPLESS_PREFIXES:
            if len(rest) < 3:
                return _non_resource(method, path)
            group, rest = rest[0], rest[1:]
        version, rest = rest[0], rest[1:]
        if rest[0] in SPECIAL_VERBS:
            if len(rest) < 2:
                raise RequestInfoError(f"unable to determine kind and namespace from url {path!r}")
            verb, rest = rest[0], rest[1:]
        else:
            verb = METHOD_VERBS.get(method, "")
        namespace = ""
        if rest[0] == "namespaces" and len(rest) > 1:
            namespace = rest[1]
            if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
        resource = rest[0]
        name = rest[1] if len(rest) >= 2 else ""
        subresource = rest[2] if len(rest) >= 3 and verb not in NO_SUBRESOURCE_VERBS else ""
        query = parse_query(query_string, KEPT_QUERY)
        verb, name = _refine_verb(verb, name, query)
        info = RequestInfo(
            True,
            path,
            verb,
            api_prefix=prefix,
            api_group=group,
            api_version=version,
            namespace=namespace,
            resource=resource,
            subresource=subresource,
            name=name,
            parts=tuple(rest),
            query=query,
        )
        return info, verb in LONG_RUNNING_VERBS or subresource in LONG_RUNNING_SUBRESOURCES

    def _from_template(
        self, t: RouteTemplate, found: dict[str, str], method: str, path: str, query_string: bytes
    ) -> tuple[RequestInfo, bool]:
        name = found.get("name", "")
        query = parse_query(query_string, KEPT_QUERY)
        verb, name = _refine_verb(METHOD_VERBS.get(method, method.lower()), name, query)
        info = RequestInfo(
            True,
            path,
            verb,
            api_group=t.api_group,
            api_version=t.api_version,
            namespace=found.get("namespace", ""),
            resource=t.effective_resource(),
            subresource=found.get("subresource", ""),
            name=name,
            query=query,
        )
        return info, t.long_running or (method in METHOD_VERBS and verb in LONG_RUNNING_VERBS)


def _non_resource(method: str, path: str) -> tuple[RequestInfo, bool]:
    verb = method.lower()
    # (the verb is the method: see LONG_RUNNING_VERBS for why it is not consulted)
    return RequestInfo(False, path, verb), path.startswith(LONG_RUNNING_PATH_PREFIX)


def _refine_verb(verb: str, name: str, query: Query) -> tuple[str, str]:
    """A nameless get is a list or a watch (maybe naming one object through ``fieldSelector``);
    a nameless delete is a deletecollection. Verbs from a ``/watch/`` prefix stay as they are."""
    if not name and verb == "get":
        verb = "watch" if is_watch(query) else "list"
        name = selected_name(query)
    if not name and verb == "delete":
        verb = "deletecollection"
    return verb, name
