"""Kubernetes validation of FlowSchema and PriorityLevelConfiguration, rule for rule.

Works on the decoded, defaulted wire form (camelCase dicts), not on the frozen objects, because
many invalid inputs (a Subject with two members, an unknown ``type``) cannot be represented by
the objects at all. Field paths, error types and messages follow
``k8s.io/kubernetes pkg/apis/flowcontrol/validation`` and ``k8s.io/apimachinery``'s
``field.Error`` rendering; every error is collected, none stops the others.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.flowcontrol.objects import FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE

REQUIRED = "Required value"
INVALID = "Invalid value"
NOT_SUPPORTED = "Unsupported value"
FORBIDDEN = "Forbidden"
DUPLICATE = "Duplicate value"
UNKNOWN_FIELD = "unknown field"  # strict decoding, rendered as the API server does

PRESERVE_ZERO_ANNOTATION = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"
SUPPORTED_VERBS = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
)
MAX_QUEUES = 10_000_000
MAX_HASH_BITS = 60
_OMIT = object()


@dataclass(frozen=True, slots=True)
class FieldError:
    type: str
    field: str
    value: object = _OMIT
    detail: str = ""

    def body(self) -> str:
        if self.type == UNKNOWN_FIELD:
            return f'unknown field "{self.field}"'
        s = self.type
        if self.value is not _OMIT and self.type not in (REQUIRED, FORBIDDEN):
            s += ": " + go_value(self.value)
        if self.detail:
            s += ": " + self.detail
        return s

    def __str__(self) -> str:
        if self.type == UNKNOWN_FIELD:
            return self.body()
        return f"{self.field}: {self.body()}"


def go_value(value: object) -> str:
    """Render a bad value the way ``field.Error`` prints it (``%v``, ``%q`` or ``%#v``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(json.dumps(v, ensure_ascii=False) for v in value) + "}"
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def not_supported(path: str, value: object, supported: Sequence[str]) -> FieldError:
    return FieldError(NOT_SUPPORTED, path, value, "supported values: " + _quoted(supported))


def _quoted(values: Sequence[str]) -> str:
    return ", ".join(json.dumps(v) for v in sorted(values))


# --- names (k8s.io/apimachinery/pkg/util/validation) ---------------------------------------------

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(_LABEL + r"(\." + _LABEL + r")*")
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _SUBDOMAIN_RE.fullmatch(value):
        errs.append(_SUBDOMAIN_MSG)
    return errs


def dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_RE.fullmatch(value):
        errs.append(_LABEL_MSG)
    return errs


def validate_metadata(meta: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateObjectMeta`` for a cluster-scoped object with a DNS-subdomain name."""
    errs: list[FieldError] = []
    name = meta.get("name", "")
    if not name:
        errs.append(FieldError(REQUIRED, "metadata.name", detail="name is required"))
    else:
        errs += [FieldError(INVALID, "metadata.name", name, m) for m in dns1123_subdomain(name)]
    if meta.get("namespace"):
        errs.append(FieldError(FORBIDDEN, "metadata.namespace", detail="not allowed on this type"))
    if meta.get("generation", 0) < 0:
        errs.append(FieldError(INVALID, "metadata.generation", meta["generation"], "must be >= 0"))
    return errs


# --- FlowSchema ----------------------------------------------------------------------------------


def validate_flow_schema(
    obj: Mapping[str, Any], fixed_spec_differs: Callable[[str, Mapping[str, Any]], bool]
) -> list[FieldError]:
    """All errors of one defaulted FlowSchema; ``fixed_spec_differs(name, spec)`` answers the
    mandatory-object rule (only called for mandatory names)."""
    meta, spec = obj.get("metadata", {}), obj.get("spec", {})
    name = meta.get("name", "")
    errs = validate_metadata(meta)
    errs += _fs_spec(name, spec)
    if name in ("exempt", "catch-all") and fixed_spec_differs(name, spec):
        errs.append(
            FieldError(INVALID, "spec", spec, f"spec of '{name}' must equal the fixed value")
        )
    errs += _conditions(obj.get("status", {}))
    return errs


def _fs_spec(name: str, spec: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    prec = spec.get("matchingPrecedence", 0)
    path = "spec.matchingPrecedence"
    if prec <= 0:
        errs.append(FieldError(INVALID, path, prec, "must be a positive value"))
    if prec > FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE:
        errs.append(
            FieldError(
                INVALID,
                path,
                prec,
                f"must not be greater than {FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE}",
            )
        )
    if prec == 1 and name != "exempt":
        errs.append(
            FieldError(
                INVALID, path, prec, "only the schema named 'exempt' may have matchingPrecedence 1"
            )
        )
    dm = spec.get("distinguisherMethod")
    if dm is not None and dm.get("type", "") not in ("ByUser", "ByNamespace"):
        errs.append(
            not_supported(
                "spec.distinguisherMethod.type", dm.get("type", ""), ("ByNamespace", "ByUser")
            )
        )
    pl_name = spec.get("priorityLevelConfiguration", {}).get("name", "")
    path = "spec.priorityLevelConfiguration.name"
    if pl_name:
        errs += [FieldError(INVALID, path, pl_name, m) for m in dns1123_subdomain(pl_name)]
    else:
        errs.append(FieldError(REQUIRED, path, detail="must reference a priority level"))
    for i, rule in enumerate(spec.get("rules", [])):
        errs += _rule(rule, f"spec.rules[{i}]")
    return errs


def _rule(rule: Mapping[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    subjects = rule.get("subjects", [])
    if not subjects:
        errs.append(
            FieldError(
                REQUIRED, f"{path}.subjects", detail="subjects must contain at least one value"
            )
        )
    for i, subject in enumerate(subjects):
        errs += _subject(subject, f"{path}.subjects[{i}]")
    res, nonres = rule.get("resourceRules", []), rule.get("nonResourceRules", [])
    if not res and not nonres:
        errs.append(
            FieldError(
                REQUIRED,
                path,
                detail="at least one of resourceRules and nonResourceRules has to be non-empty",
            )
        )
    for i, rr in enumerate(res):
        errs += _resource_rule(rr, f"{path}.resourceRules[{i}]")
    for i, nr in enumerate(nonres):
        errs += _nonresource_rule(nr, f"{path}.nonResourceRules[{i}]")
    return errs


_MEMBERS = {"ServiceAccount": "serviceAccount", "User": "user", "Group": "group"}


def _subject(subject: Mapping[str, Any], path: str) -> list[FieldError]:
    kind = subject.get("kind", "")
    if kind not in _MEMBERS:
        return [not_supported(f"{path}.kind", kind, tuple(_MEMBERS))]
    errs: list[FieldError] = []
    for member_kind, member in _MEMBERS.items():
        value = subject.get(member)
        if member_kind != kind:
            if value is not None:
                errs.append(
                    FieldError(
                        FORBIDDEN,
                        f"{path}.{member}",
                        detail=f"{member} is forbidden when subject kind is not '{member_kind}'",
                    )
                )
        elif value is None:
            errs.append(
                FieldError(
                    REQUIRED,
                    f"{path}.{member}",
                    detail=f"{member} is required when subject kind is '{member_kind}'",
                )
            )
        else:
            errs += _member(kind, value, f"{path}.{member}")
    return errs


def _member(kind: str, value: Mapping[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    name = value.get("name", "")
    if not name:
        errs.append(FieldError(REQUIRED, f"{path}.name"))
    elif kind == "ServiceAccount" and name != "*":
        errs += [FieldError(INVALID, f"{path}.name", name, m) for m in dns1123_subdomain(name)]
    if kind == "ServiceAccount":
        ns = value.get("namespace", "")
        if ns:
            errs += [FieldError(INVALID, f"{path}.namespace", ns, m) for m in dns1123_label(ns)]
        else:
            errs.append(
                FieldError(
                    REQUIRED,
                    f"{path}.namespace",
                    detail="must specify namespace for service account",
                )
            )
    return errs


def _verbs(verbs: Sequence[str], path: str) -> list[FieldError]:
    if not verbs:
        return [FieldError(REQUIRED, path, detail="verbs must contain at least one value")]
    if "*" in verbs:
        if len(verbs) > 1:
            return [
                FieldError(
                    INVALID, path, list(verbs), "if '*' is present, must not specify other verbs"
                )
            ]
        return []
    if not set(verbs) <= set(SUPPORTED_VERBS):
        return [not_supported(path, list(verbs), SUPPORTED_VERBS)]
    return []


def _wildcard_list(values: Sequence[str], path: str, required: str, what: str) -> list[FieldError]:
    if not values:
        return [FieldError(REQUIRED, path, detail=required)]
    if len(values) > 1 and "*" in values:
        return [
            FieldError(
                INVALID, path, list(values), f"if '*' is present, must not specify other {what}"
            )
        ]
    return []


_NS_INTRO = "each member of this list must be '*' or a DNS-1123 label; "


def _resource_rule(rule: Mapping[str, Any], path: str) -> list[FieldError]:
    errs = _verbs(rule.get("verbs", []), f"{path}.verbs")
    errs += _wildcard_list(
        rule.get("apiGroups", []),
        f"{path}.apiGroups",
        "resource rules must supply at least one api group",
        "api groups",
    )
    errs += _wildcard_list(
        rule.get("resources", []),
        f"{path}.resources",
        "resource rules must supply at least one resource",
        "resources",
    )
    namespaces = rule.get("namespaces", [])
    if not namespaces and not rule.get("clusterScope", False):
        errs.append(
            FieldError(
                REQUIRED,
                f"{path}.namespaces",
                detail="resource rules that are not cluster scoped must supply at least one "
                "namespace",
            )
        )
    elif "*" in namespaces:
        if len(namespaces) > 1:
            errs.append(
                FieldError(
                    INVALID,
                    f"{path}.namespaces",
                    list(namespaces),
                    "if '*' is present, must not specify other namespaces",
                )
            )
    else:
        for i, ns in enumerate(namespaces):
            p = f"{path}.namespaces[{i}]"
            errs += [FieldError(INVALID, p, ns, _NS_INTRO + m) for m in dns1123_label(ns)]
    return errs


def _nonresource_rule(rule: Mapping[str, Any], path: str) -> list[FieldError]:
    errs = _verbs(rule.get("verbs", []), f"{path}.verbs")
    urls = rule.get("nonResourceURLs", [])
    p = f"{path}.nonResourceURLs"
    if not urls:
        errs.append(
            FieldError(REQUIRED, p, detail="nonResourceURLs must contain at least one value")
        )
    elif "*" in urls:
        if len(urls) > 1:
            errs.append(
                FieldError(
                    INVALID,
                    p,
                    list(urls),
                    "if '*' is present, must not specify other non-resource URLs",
                )
            )
    else:
        for i, url in enumerate(urls):
            msg = nonresource_url_problem(url)
            if msg:
                errs.append(FieldError(INVALID, f"{p}[{i}]", url, msg))
    return errs


def nonresource_url_problem(path: str) -> str:
    if not path:
        return "must not be empty"
    if path == "/":
        return ""
    if not path.startswith("/"):
        return "must start with slash"
    if " " in path:
        return "must not contain white-space"
    if "//" in path:
        return "must not contain double slash"
    stars = path.count("*")
    if stars > 1 or (stars == 1 and not path.endswith("/*")):
        return "wildcard can only do suffix matching"
    return ""


def _conditions(status: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, cond in enumerate(status.get("conditions", [])):
        ctype = cond.get("type", "")
        if ctype in seen:
            errs.append(FieldError(DUPLICATE, f"status.conditions[{i}].type", ctype))
        seen.add(ctype)
        if not ctype:
            errs.append(
                FieldError(REQUIRED, f"status.conditions[{i}].type", detail="must not be empty")
            )
    return errs


# --- PriorityLevelConfiguration ------------------------------------------------------------------


def validate_priority_level(
    obj: Mapping[str, Any], fixed_spec_differs: Callable[[str, Mapping[str, Any]], bool]
) -> list[FieldError]:
    meta, spec = obj.get("metadata", {}), obj.get("spec", {})
    name = meta.get("name", "")
    errs = validate_metadata(meta)
    if PRESERVE_ZERO_ANNOTATION in meta.get("annotations", {}):
        errs.append(
            FieldError(
                FORBIDDEN,
                "metadata.annotations",
                detail=f"annotation '{PRESERVE_ZERO_ANNOTATION}' is forbidden",
            )
        )
    errs += _pl_spec(name, spec)
    if name in ("exempt", "catch-all") and fixed_spec_differs(name, spec):
        msg = (
            "spec of 'exempt' except the 'spec.exempt' field must equal the fixed value"
            if name == "exempt"
            else f"spec of '{name}' must equal the fixed value"
        )
        errs.append(FieldError(INVALID, "spec", spec, msg))
    errs += _conditions(obj.get("status", {}))
    return errs


def _pl_spec(name: str, spec: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    ptype = spec.get("type", "")
    if (name == "exempt") != (ptype == "Exempt"):
        errs.append(
            FieldError(
                INVALID, "spec.type", ptype, "type must be 'Exempt' if and only if name is 'exempt'"
            )
        )
    limited, exempt = spec.get("limited"), spec.get("exempt")
    if ptype == "Exempt":
        if limited is not None:
            errs.append(
                FieldError(
                    FORBIDDEN, "spec.limited", detail="must be nil if the type is not Limited"
                )
            )
        if exempt is not None:
            errs += _exempt(exempt)
    elif ptype == "Limited":
        if exempt is not None:
            errs.append(
                FieldError(FORBIDDEN, "spec.exempt", detail="must be nil if the type is Limited")
            )
        if limited is None:
            errs.append(
                FieldError(
                    REQUIRED, "spec.limited", detail="must not be empty when type is Limited"
                )
            )
        else:
            errs += _limited(limited)
    else:
        errs.append(not_supported("spec.type", ptype, ("Exempt", "Limited")))
    return errs


def _exempt(exempt: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    ncs = exempt.get("nominalConcurrencyShares")
    if ncs is not None and ncs < 0:
        errs.append(
            FieldError(
                INVALID,
                "spec.exempt.nominalConcurrencyShares",
                ncs,
                "must be a non-negative integer",
            )
        )
    lp = exempt.get("lendablePercent")
    if lp is not None and not 0 <= lp <= 100:
        errs.append(
            FieldError(
                INVALID, "spec.exempt.lendablePercent", lp, "must be between 0 and 100, inclusive"
            )
        )
    return errs


def _limited(limited: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    ncs = limited.get("nominalConcurrencyShares", 0)
    if ncs < 0:
        errs.append(
            FieldError(
                INVALID,
                "spec.limited.nominalConcurrencyShares",
                ncs,
                "must be a non-negative integer",
            )
        )
    lp = limited.get("lendablePercent")
    if lp is not None and not 0 <= lp <= 100:
        errs.append(
            FieldError(
                INVALID, "spec.limited.lendablePercent", lp, "must be between 0 and 100, inclusive"
            )
        )
    blp = limited.get("borrowingLimitPercent")
    if blp is not None and blp < 0:
        errs.append(
            FieldError(
                INVALID,
                "spec.limited.borrowingLimitPercent",
                blp,
                "if specified, must be a non-negative integer",
            )
        )
    lr = limited.get("limitResponse", {})
    path = "spec.limited.limitResponse"
    lr_type, queuing = lr.get("type", ""), lr.get("queuing")
    if lr_type == "Reject":
        if queuing is not None:
            errs.append(
                FieldError(
                    FORBIDDEN,
                    f"{path}.queuing",
                    detail="must be nil if limited.limitResponse.type is not Limited",
                )
            )
    elif lr_type == "Queue":
        if queuing is None:
            errs.append(
                FieldError(
                    REQUIRED,
                    f"{path}.queuing",
                    detail="must not be empty if limited.limitResponse.type is Limited",
                )
            )
        else:
            errs += _queuing(queuing, f"{path}.queuing")
    else:
        errs.append(not_supported(f"{path}.type", lr_type, ("Queue", "Reject")))
    return errs


def required_entropy_bits(deck_size: int, hand_size: int) -> int:
    """``shufflesharding.RequiredEntropyBits``: ceil(log2(deckSize) * handSize)."""
    return math.ceil(math.log2(deck_size) * hand_size)


def _queuing(q: Mapping[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    qll, queues, hand = q.get("queueLengthLimit", 0), q.get("queues", 0), q.get("handSize", 0)
    if qll <= 0:
        errs.append(FieldError(INVALID, f"{path}.queueLengthLimit", qll, "must be positive"))
    if queues <= 0:
        errs.append(FieldError(INVALID, f"{path}.queues", queues, "must be positive"))
    elif queues > MAX_QUEUES:
        errs.append(
            FieldError(INVALID, f"{path}.queues", queues, f"must not be greater than {MAX_QUEUES}")
        )
    if hand <= 0:
        errs.append(FieldError(INVALID, f"{path}.handSize", hand, "must be positive"))
    elif hand > queues:
        errs.append(
            FieldError(
                INVALID, f"{path}.handSize", hand, f"should not be greater than queues ({queues})"
            )
        )
    elif required_entropy_bits(queues, hand) > MAX_HASH_BITS:
        msg = f"required entropy bits of deckSize {queues} and handSize {hand} should not be greater than {MAX_HASH_BITS}"  # noqa: E501
        errs.append(FieldError(INVALID, f"{path}.handSize", hand, msg))
    return errs
