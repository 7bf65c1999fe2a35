"""What a request asks for: Kubernetes ``RequestInfo`` from path, method and query.

Follows ``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``: ``/api/{version}/...`` and
``/apis/{group}/{version}/...`` are resource requests, ``/watch/`` and ``/proxy/`` prefixes set
the verb, ``namespaces/{ns}/{resource}`` sets the namespace, GET without a name is list or
watch, DELETE without a name is deletecollection. Route templates (``/v2/{namespace}/items/{name}``)
describe non-Kubernetes APIs and are tried first; anything else is a non-resource request.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from gateway.flowcontrol.digest import RequestInfo

API_PREFIXES = frozenset({"api", "apis"})
GROUPLESS_PREFIXES = frozenset({"api"})
SPECIAL_VERBS = frozenset({"proxy", "watch"})
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
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
        "timeoutSeconds",
        "timeout",
    }
)
TRUE_VALUES = frozenset({"1", "true", "True"})


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
                found[seg[1:-1]] = part
            elif seg != part:
                return None
        return found


class RequestInfoParser:
    def __init__(self, templates: tuple[RouteTemplate, ...] = ()) -> None:
        self.templates = templates

    def parse(self, method: str, path: str, query_string: bytes) -> tuple[RequestInfo, bool]:
        """The request info and whether the request is long-running (watch, proxy, exec, ...)."""
        # ASGI's ``path`` is already percent-decoded, as Go's ``URL.Path`` is.
        parts = [p for p in path.split("/") if p]
        for template in self.templates:
            found = template.match(parts)
            if found is not None:
                return self._from_template(template, found, method, path, query_string)
        if len(parts) < 3 or parts[0] not in API_PREFIXES:
            return RequestInfo(False, path, method.lower()), False
        return self._kubernetes(parts, method, path, query_string)

    def _kubernetes(
        self, parts: list[str], method: str, path: str, query_string: bytes
    ) -> tuple[RequestInfo, bool]:
        prefix = parts[0]
        rest = parts[1:]
        group = ""
        if prefix not in GROUPLESS_PREFIXES:
            if len(rest) < 3:
                return RequestInfo(False, path, method.lower()), False
            group, rest = rest[0], rest[1:]
        version, rest = rest[0], rest[1:]
        via_special = False
        if rest and rest[0] in SPECIAL_VERBS:
            if len(rest) < 2:
                return RequestInfo(False, path, method.lower()), False
            verb, rest, via_special = rest[0], rest[1:], True
        else:
            verb = METHOD_VERBS.get(method, "")
        namespace = ""
        if rest and rest[0] == "namespaces" and len(rest) > 1:
            namespace = rest[1]
            if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
        resource = rest[0] if rest else ""
        name = rest[1] if len(rest) >= 2 else ""
        subresource = rest[2] if len(rest) >= 3 and verb != "proxy" else ""
        query = _query(query_string)
        verb, name = _refine_verb(verb, name, query, via_special)
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
        query = _query(query_string)
        verb, name = _refine_verb(METHOD_VERBS.get(method, method.lower()), name, query, False)
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
        return info, t.long_running or verb == "watch"


def _refine_verb(
    verb: str, name: str, query: tuple[tuple[str, str], ...], via_special: bool
) -> tuple[str, str]:
    if not name and verb == "get" and not via_special:
        verb = "watch" if _value(query, "watch") in TRUE_VALUES else "list"
    if verb in ("list", "watch") and not name:
        selector = _value(query, "fieldSelector")
        for term in selector.split(","):
            key, _, value = term.partition("=")
            if key.strip() == "metadata.name" and value and not value.startswith("="):
                name = value.strip()
    if not name and verb == "delete":
        verb = "deletecollection"
    return verb, name


def _query(query_string: bytes) -> tuple[tuple[str, str], ...]:
    if not query_string:
        return ()
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    return tuple((k, v) for k, v in pairs if k in KEPT_QUERY)


def _value(query: tuple[tuple[str, str], ...], key: str) -> str:
    for k, v in query:
        if k == key:
            return v
    return ""
