"""Kubernetes validation of FlowSchema and PriorityLevelConfiguration, rule for rule.

Works on the decoded, defaulted wire form (camelCase dicts), not on the frozen objects, because
many invalid inputs (a Subject with two members, an unknown ``type``) cannot be represented by
the objects at all. Field paths, error types and messages follow
``k8s.io/kubernetes pkg/apis/flowcontrol/validation``; every error is collected, none stops the
others. The mandatory-object rule needs the fixed specs, which the caller supplies as
``fixed_spec_differs(name, spec)`` (only asked for the names ``exempt`` and ``catch-all``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.apfconfig.fielderrors import (
    DUPLICATE,
    FieldError,
    dns1123_label,
    dns1123_subdomain,
    forbidden,
    invalid,
    not_supported,
    required,
    validate_metadata,
)
from gateway.flowcontrol.objects import FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE

PRESERVE_ZERO_ANNOTATION = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"
SUPPORTED_VERBS = (
    "get",
    "list",
    "create",
    "update",
    "delete",
    "deletecollection",
    "patch",
    "watch",
    "proxy",
)
MAX_QUEUES = 10_000_000  # priorityLevelConfigurationQueuingMaxQueues
MAX_HASH_BITS = 60  # shufflesharding.MaxHashBits

FixedSpecCheck = Callable[[str, Mapping[str, Any]], bool]
Errors = list[FieldError]


def validate_flow_schema(obj: Mapping[str, Any], fixed_spec_differs: FixedSpecCheck) -> Errors:
    """``ValidateFlowSchema``: metadata, spec, the mandatory fixed spec, status."""
    meta, spec = obj.get("metadata", {}), obj.get("spec", {})
    name = meta.get("name", "")
    errs = validate_metadata(meta) + _fs_spec(name, spec)
    if name in ("exempt", "catch-all") and fixed_spec_differs(name, spec):
        errs.append(invalid("spec", spec, f"spec of '{name}' must equal the fixed value"))
    return errs + _conditions(obj.get("status", {}))


def _fs_spec(name: str, spec: Mapping[str, Any]) -> Errors:
    errs: Errors = []
    prec, path = spec.get("matchingPrecedence", 0), "spec.matchingPrecedence"
    if prec <= 0:
        errs.append(invalid(path, prec, "must be a positive value"))
    if prec > FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE:
        msg = f"must not be greater than {FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE}"
        errs.append(invalid(path, prec, msg))
    if prec == 1 and name != "exempt":
        msg = "only the schema named 'exempt' may have matchingPrecedence 1"
        errs.append(invalid(path, prec, msg))
    dm = spec.get("distinguisherMethod")
    if dm is not None and dm.get("type", "") not in ("ByUser", "ByNamespace"):
        path = "spec.distinguisherMethod.type"
        errs.append(not_supported(path, dm.get("type", ""), ("ByNamespace", "ByUser")))
    pl_name = spec.get("priorityLevelConfiguration", {}).get("name", "")
    path = "spec.priorityLevelConfiguration.name"
    if pl_name:
        errs += [invalid(path, pl_name, m) for m in dns1123_subdomain(pl_name)]
    else:
        errs.append(required(path, "must reference a priority level"))
    for i, rule in enumerate(spec.get("rules", [])):
        errs += _rule(rule, f"spec.rules[{i}]")
    return errs


def _rule(rule: Mapping[str, Any], path: str) -> Errors:
    errs: Errors = []
    subjects = rule.get("subjects", [])
    if not subjects:
        errs.append(required(f"{path}.subjects", "subjects must contain at least one value"))
    for i, subject in enumerate(subjects):
        errs += _subject(subject, f"{path}.subjects[{i}]")
    res, nonres = rule.get("resourceRules", []), rule.get("nonResourceRules", [])
    if not res and not nonres:
        msg = "at least one of resourceRules and nonResourceRules has to be non-empty"
        errs.append(required(path, msg))
    for i, rr in enumerate(res):
        errs += _resource_rule(rr, f"{path}.resourceRules[{i}]")
    for i, nr in enumerate(nonres):
        errs += _nonresource_rule(nr, f"{path}.nonResourceRules[{i}]")
    return errs


_MEMBERS = {"ServiceAccount": "serviceAccount", "User": "user", "Group": "group"}


def _subject(subject: Mapping[str, Any], path: str) -> Errors:
    kind = subject.get("kind", "")
    if kind not in _MEMBERS:
        return [not_supported(f"{path}.kind", kind, tuple(_MEMBERS))]
    errs: Errors = []
    for member_kind, member in _MEMBERS.items():
        value, mpath = subject.get(member), f"{path}.{member}"
        if member_kind != kind:
            if value is not None:
                errs.append(
                    forbidden(
                        mpath, f"{member} is forbidden when subject kind is not '{member_kind}'"
                    )
                )
        elif value is None:
            errs.append(required(mpath, f"{member} is required when subject kind is '{kind}'"))
        else:
            errs += _member(kind, value, mpath)
    return errs


def _member(kind: str, value: Mapping[str, Any], path: str) -> Errors:
    errs: Errors = []
    name = value.get("name", "")
    if not name:
        errs.append(required(f"{path}.name"))
    elif kind == "ServiceAccount" and name != "*":
        errs += [invalid(f"{path}.name", name, m) for m in dns1123_subdomain(name)]
    if kind == "ServiceAccount":
        ns = value.get("namespace", "")
        if ns:
            errs += [invalid(f"{path}.namespace", ns, m) for m in dns1123_label(ns)]
        else:
            errs.append(required(f"{path}.namespace", "must specify namespace for service account"))
    return errs


def _verbs(verbs: Sequence[str], path: str) -> Errors:
    if not verbs:
        return [required(path, "verbs must contain at least one value")]
    if "*" in verbs:
        if len(verbs) > 1:
            return [invalid(path, list(verbs), "if '*' is present, must not specify other verbs")]
        return []
    if not set(verbs) <= set(SUPPORTED_VERBS):
        return [not_supported(path, list(verbs), SUPPORTED_VERBS)]
    return []


def _wildcard_alone(values: Sequence[str], path: str, what: str) -> Errors:
    if len(values) > 1 and "*" in values:
        return [invalid(path, list(values), f"if '*' is present, must not specify other {what}")]
    return []


_NS_INTRO = "each member of this list must be '*' or a DNS-1123 label; "


def _resource_rule(rule: Mapping[str, Any], path: str) -> Errors:
    errs = _verbs(rule.get("verbs", []), f"{path}.verbs")
    groups, resources = rule.get("apiGroups", []), rule.get("resources", [])
    if not groups:
        errs.append(
            required(f"{path}.apiGroups", "resource rules must supply at least one api group")
        )
    errs += _wildcard_alone(groups, f"{path}.apiGroups", "api groups")
    if not resources:
        errs.append(
            required(f"{path}.resources", "resource rules must supply at least one resource")
        )
    errs += _wildcard_alone(resources, f"{path}.resources", "resources")
    namespaces, npath = rule.get("namespaces", []), f"{path}.namespaces"
    if not namespaces and not rule.get("clusterScope", False):
        msg = "resource rules that are not cluster scoped must supply at least one namespace"
        errs.append(required(npath, msg))
    elif "*" in namespaces:
        errs += _wildcard_alone(namespaces, npath, "namespaces")
    else:
        for i, ns in enumerate(namespaces):
            errs += [invalid(f"{npath}[{i}]", ns, _NS_INTRO + m) for m in dns1123_label(ns)]
    return errs


def _nonresource_rule(rule: Mapping[str, Any], path: str) -> Errors:
    errs = _verbs(rule.get("verbs", []), f"{path}.verbs")
    urls, upath = rule.get("nonResourceURLs", []), f"{path}.nonResourceURLs"
    if not urls:
        errs.append(required(upath, "nonResourceURLs must contain at least one value"))
    elif "*" in urls:
        errs += _wildcard_alone(urls, upath, "non-resource URLs")
    else:
        for i, url in enumerate(urls):
            if msg := nonresource_url_problem(url):
                errs.append(invalid(f"{upath}[{i}]", url, msg))
    return errs


def nonresource_url_problem(path: str) -> str:
    """``ValidateNonResourceURLPath``: "" when fine, else the reason."""
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


def _conditions(status: Mapping[str, Any]) -> Errors:
    errs: Errors = []
    seen: set[str] = set()
    for i, cond in enumerate(status.get("conditions", [])):
        ctype, path = cond.get("type", ""), f"status.conditions[{i}].type"
        if ctype in seen:
            errs.append(FieldError(DUPLICATE, path, ctype))
        seen.add(ctype)
        if not ctype:
            errs.append(required(path, "must not be empty"))
    return errs


def validate_priority_level(obj: Mapping[str, Any], fixed_spec_differs: FixedSpecCheck) -> Errors:
    """``ValidatePriorityLevelConfiguration`` for an object already converted to v1 semantics."""
    meta, spec = obj.get("metadata", {}), obj.get("spec", {})
    name = meta.get("name", "")
    errs = validate_metadata(meta)
    if PRESERVE_ZERO_ANNOTATION in meta.get("annotations", {}):
        msg = f"annotation '{PRESERVE_ZERO_ANNOTATION}' is forbidden"
        errs.append(forbidden("metadata.annotations", msg))
    errs += _pl_spec(name, spec)
    if name in ("exempt", "catch-all") and fixed_spec_differs(name, spec):
        msg = f"spec of '{name}' must equal the fixed value"
        if name == "exempt":
            msg = "spec of 'exempt' except the 'spec.exempt' field must equal the fixed value"
        errs.append(invalid("spec", spec, msg))
    return errs + _conditions(obj.get("status", {}))


def _pl_spec(name: str, spec: Mapping[str, Any]) -> Errors:
    errs: Errors = []
    ptype = spec.get("type", "")
    if (name == "exempt") != (ptype == "Exempt"):
        msg = "type must be 'Exempt' if and only if name is 'exempt'"
        errs.append(invalid("spec.type", ptype, msg))
    limited, exempt = spec.get("limited"), spec.get("exempt")
    if ptype == "Exempt":
        if limited is not None:
            errs.append(forbidden("spec.limited", "must be nil if the type is not Limited"))
        if exempt is not None:
            errs += _shares("spec.exempt", exempt)
    elif ptype == "Limited":
        if exempt is not None:
            errs.append(forbidden("spec.exempt", "must be nil if the type is Limited"))
        if limited is None:
            errs.append(required("spec.limited", "must not be empty when type is Limited"))
        else:
            errs += _limited(limited)
    else:
        errs.append(not_supported("spec.type", ptype, ("Exempt", "Limited")))
    return errs


def _shares(path: str, cfg: Mapping[str, Any]) -> Errors:
    """nominalConcurrencyShares and lendablePercent, common to ``limited`` and ``exempt``."""
    errs: Errors = []
    ncs = cfg.get("nominalConcurrencyShares")
    if ncs is not None and ncs < 0:
        msg = "must be a non-negative integer"
        errs.append(invalid(f"{path}.nominalConcurrencyShares", ncs, msg))
    lp = cfg.get("lendablePercent")
    if lp is not None and not 0 <= lp <= 100:
        errs.append(invalid(f"{path}.lendablePercent", lp, "must be between 0 and 100, inclusive"))
    return errs


def _limited(limited: Mapping[str, Any]) -> Errors:
    errs = _shares("spec.limited", limited)
    blp = limited.get("borrowingLimitPercent")
    if blp is not None and blp < 0:
        msg = "if specified, must be a non-negative integer"
        errs.append(invalid("spec.limited.borrowingLimitPercent", blp, msg))
    lr, path = limited.get("limitResponse", {}), "spec.limited.limitResponse"
    lr_type, queuing = lr.get("type", ""), lr.get("queuing")
    if lr_type == "Reject":
        if queuing is not None:
            msg = "must be nil if limited.limitResponse.type is not Limited"
            errs.append(forbidden(f"{path}.queuing", msg))
    elif lr_type == "Queue":
        if queuing is None:
            msg = "must not be empty if limited.limitResponse.type is Limited"
            errs.append(required(f"{path}.queuing", msg))
        else:
            errs += _queuing(queuing, f"{path}.queuing")
    else:
        errs.append(not_supported(f"{path}.type", lr_type, ("Queue", "Reject")))
    return errs


def required_entropy_bits(deck_size: int, hand_size: int) -> int:
    """``shufflesharding.RequiredEntropyBits``: ceil(log2(deckSize) * handSize)."""
    return math.ceil(math.log2(deck_size) * hand_size)


def _queuing(q: Mapping[str, Any], path: str) -> Errors:
    errs: Errors = []
    qll, queues, hand = q.get("queueLengthLimit", 0), q.get("queues", 0), q.get("handSize", 0)
    if qll <= 0:
        errs.append(invalid(f"{path}.queueLengthLimit", qll, "must be positive"))
    if queues <= 0:
        errs.append(invalid(f"{path}.queues", queues, "must be positive"))
    elif queues > MAX_QUEUES:
        errs.append(invalid(f"{path}.queues", queues, f"must not be greater than {MAX_QUEUES}"))
    if hand <= 0:
        errs.append(invalid(f"{path}.handSize", hand, "must be positive"))
    elif hand > queues:
        msg = f"should not be greater than queues ({queues})"
        errs.append(invalid(f"{path}.handSize", hand, msg))
    elif required_entropy_bits(queues, hand) > MAX_HASH_BITS:
        msg = (
            f"required entropy bits of deckSize {queues} and handSize {hand} "
            f"should not be greater than {MAX_HASH_BITS}"
        )
        errs.append(invalid(f"{path}.handSize", hand, msg))
    return errs
