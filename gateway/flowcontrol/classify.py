"""Matching requests against FlowSchemas, exactly as Kubernetes' ``rule.go``.

A wildcard counts only when a list is exactly ``["*"]``; non-resource URL patterns match the
path itself or anything under ``pattern/`` (a trailing ``*`` is dropped first).
"""

from __future__ import annotations

from gateway.flowcontrol.digest import RequestDigest, UserInfo
from gateway.flowcontrol.objects import (
    FlowSchema,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def _has(values: tuple[str, ...], value: str) -> bool:
    return values == ("*",) or value in values


def subject_matches(subject: Subject, user: UserInfo) -> bool:
    if subject.kind is SubjectKind.USER:
        return subject.name in ("*", user.name)
    if subject.kind is SubjectKind.GROUP:
        return subject.name == "*" or subject.name in user.groups
    prefix = f"{SERVICE_ACCOUNT_PREFIX}{subject.namespace}:"
    if subject.name == "*":
        return user.name.startswith(prefix)
    return user.name == prefix + subject.name


def resource_rule_matches(rule: ResourcePolicyRule, digest: RequestDigest) -> bool:
    info = digest.info
    if not _has(rule.verbs, info.verb):
        return False
    resource = info.resource if not info.subresource else f"{info.resource}/{info.subresource}"
    if not _has(rule.resources, resource) or not _has(rule.api_groups, info.api_group):
        return False
    if not info.namespace:
        return rule.cluster_scope
    return _has(rule.namespaces, info.namespace)


def non_resource_url_matches(pattern: str, path: str) -> bool:
    if pattern in ("*", path):
        return True
    prefix = pattern.removesuffix("*")
    if not prefix.endswith("/"):
        prefix += "/"
    return path.startswith(prefix)


def non_resource_rule_matches(rule: NonResourcePolicyRule, digest: RequestDigest) -> bool:
    info = digest.info
    if not _has(rule.verbs, info.verb):
        return False
    return any(non_resource_url_matches(u, info.path) for u in rule.non_resource_urls)


def rule_matches(rule: PolicyRulesWithSubjects, digest: RequestDigest) -> bool:
    if not any(subject_matches(s, digest.user) for s in rule.subjects):
        return False
    if digest.info.is_resource_request:
        return any(resource_rule_matches(r, digest) for r in rule.resource_rules)
    return any(non_resource_rule_matches(r, digest) for r in rule.non_resource_rules)


def flow_schema_matches(fs: FlowSchema, digest: RequestDigest) -> bool:
    return any(rule_matches(rule, digest) for rule in fs.spec.rules)


def matching_order(flow_schemas: list[FlowSchema]) -> list[FlowSchema]:
    """Ascending ``matchingPrecedence``, ties by name (byte-wise)."""
    return sorted(flow_schemas, key=lambda fs: (fs.spec.matching_precedence, fs.name.encode()))
