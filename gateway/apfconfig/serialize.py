"""The two directions between frozen objects and the Kubernetes wire form (camelCase dicts/YAML).

``to_dict``/``dump_yaml`` write ``flowcontrol.apiserver.k8s.io/v1`` in the defaulted form, so
output loads back to equal objects. ``from_dict`` builds objects from a dict that already went
through strict decoding, defaulting and validation (``gateway.apfconfig.loader`` does that);
given anything else it raises ``ValueError``/``KeyError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gateway.apfconfig.configset import ConfigSet
from gateway.flowcontrol.objects import (
    DistinguisherMethod,
    ExemptPriorityLevelConfiguration,
    FlowSchema,
    FlowSchemaCondition,
    FlowSchemaSpec,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    LimitResponseType,
    NonResourcePolicyRule,
    ObjectMeta,
    PolicyRulesWithSubjects,
    PriorityLevelConfiguration,
    PriorityLevelConfigurationSpec,
    PriorityLevelType,
    QueuingConfiguration,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)

API_VERSION = "flowcontrol.apiserver.k8s.io/v1"


# --- objects -> wire ------------------------------------------------------------------------------


def to_dict(obj: FlowSchema | PriorityLevelConfiguration) -> dict[str, Any]:
    if isinstance(obj, FlowSchema):
        out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "FlowSchema"}
        out["metadata"] = _meta_to_dict(obj.metadata)
        out["spec"] = fs_spec_to_dict(obj.spec)
        if obj.conditions:
            out["status"] = {"conditions": [_condition_to_dict(c) for c in obj.conditions]}
        return out
    return {
        "apiVersion": API_VERSION,
        "kind": "PriorityLevelConfiguration",
        "metadata": _meta_to_dict(obj.metadata),
        "spec": pl_spec_to_dict(obj.spec),
    }


def dump_yaml(config: ConfigSet) -> str:
    """A multi-document YAML stream: priority levels first, then flow schemas."""
    docs = [to_dict(pl) for pl in config.priority_levels]
    docs += [to_dict(fs) for fs in config.flow_schemas]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump_all(docs, Dumper=dumper, sort_keys=False, default_flow_style=False, width=100)


def _meta_to_dict(meta: ObjectMeta) -> dict[str, Any]:
    out: dict[str, Any] = {"name": meta.name}
    if meta.uid:
        out["uid"] = meta.uid
    if meta.resource_version:
        out["resourceVersion"] = meta.resource_version
    if meta.generation:
        out["generation"] = meta.generation
    if meta.labels:
        out["labels"] = dict(meta.labels)
    if meta.annotations:
        out["annotations"] = dict(meta.annotations)
    return out


def _condition_to_dict(c: FlowSchemaCondition) -> dict[str, Any]:
    out: dict[str, Any] = {"type": c.type, "status": c.status}
    if c.last_transition_time:
        out["lastTransitionTime"] = c.last_transition_time
    if c.reason:
        out["reason"] = c.reason
    if c.message:
        out["message"] = c.message
    return out


def fs_spec_to_dict(spec: FlowSchemaSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "matchingPrecedence": spec.matching_precedence,
        "priorityLevelConfiguration": {"name": spec.priority_level_name},
    }
    if spec.distinguisher_method is not None:
        out["distinguisherMethod"] = {"type": str(spec.distinguisher_method)}
    out["rules"] = [_rule_to_dict(r) for r in spec.rules]
    return out


def _rule_to_dict(rule: PolicyRulesWithSubjects) -> dict[str, Any]:
    out: dict[str, Any] = {"subjects": [_subject_to_dict(s) for s in rule.subjects]}
    if rule.resource_rules:
        out["resourceRules"] = [
            {
                "verbs": list(r.verbs),
                "apiGroups": list(r.api_groups),
                "resources": list(r.resources),
                "clusterScope": r.cluster_scope,
                "namespaces": list(r.namespaces),
            }
            for r in rule.resource_rules
        ]
    if rule.non_resource_rules:
        out["nonResourceRules"] = [
            {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
            for r in rule.non_resource_rules
        ]
    return out


def _subject_to_dict(s: Subject) -> dict[str, Any]:
    if s.kind is SubjectKind.SERVICE_ACCOUNT:
        return {
            "kind": "ServiceAccount",
            "serviceAccount": {"namespace": s.namespace, "name": s.name},
        }
    member = "user" if s.kind is SubjectKind.USER else "group"
    return {"kind": str(s.kind), member: {"name": s.name}}


def pl_spec_to_dict(spec: PriorityLevelConfigurationSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"type": str(spec.type)}
    if spec.limited is not None:
        lim = spec.limited
        limited: dict[str, Any] = {
            "nominalConcurrencyShares": lim.nominal_concurrency_shares,
            "lendablePercent": lim.lendable_percent,
        }
        if lim.borrowing_limit_percent is not None:
            limited["borrowingLimitPercent"] = lim.borrowing_limit_percent
        response: dict[str, Any] = {"type": str(lim.limit_response.type)}
        q = lim.limit_response.queuing
        if q is not None:
            response["queuing"] = {
                "queues": q.queues,
                "handSize": q.hand_size,
                "queueLengthLimit": q.queue_length_limit,
            }
        limited["limitResponse"] = response
        out["limited"] = limited
    if spec.exempt is not None:
        out["exempt"] = {
            "nominalConcurrencyShares": spec.exempt.nominal_concurrency_shares,
            "lendablePercent": spec.exempt.lendable_percent,
        }
    return out


# --- wire -> objects ------------------------------------------------------------------------------


def meta_from_dict(meta: Mapping[str, Any]) -> ObjectMeta:
    return ObjectMeta(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        generation=meta.get("generation", 0),
        annotations=tuple(meta.get("annotations", {}).items()),
        labels=tuple(meta.get("labels", {}).items()),
    )


def flow_schema_from_dict(obj: Mapping[str, Any]) -> FlowSchema:
    conditions = tuple(
        FlowSchemaCondition(
            type=c.get("type", ""),
            status=c.get("status", ""),
            reason=c.get("reason", ""),
            message=c.get("message", ""),
            last_transition_time=c.get("lastTransitionTime", ""),
        )
        for c in obj.get("status", {}).get("conditions", [])
    )
    return FlowSchema(
        meta_from_dict(obj.get("metadata", {})), fs_spec_from_dict(obj["spec"]), conditions
    )


def fs_spec_from_dict(spec: Mapping[str, Any]) -> FlowSchemaSpec:
    dm = spec.get("distinguisherMethod")
    return FlowSchemaSpec(
        priority_level_name=spec["priorityLevelConfiguration"]["name"],
        matching_precedence=spec["matchingPrecedence"],
        distinguisher_method=None if dm is None else DistinguisherMethod(dm["type"]),
        rules=tuple(_rule_from_dict(r) for r in spec.get("rules", [])),
    )


def _rule_from_dict(rule: Mapping[str, Any]) -> PolicyRulesWithSubjects:
    return PolicyRulesWithSubjects(
        subjects=tuple(_subject_from_dict(s) for s in rule.get("subjects", [])),
        resource_rules=tuple(
            ResourcePolicyRule(
                verbs=tuple(r.get("verbs", [])),
                api_groups=tuple(r.get("apiGroups", [])),
                resources=tuple(r.get("resources", [])),
                cluster_scope=r.get("clusterScope", False),
                namespaces=tuple(r.get("namespaces", [])),
            )
            for r in rule.get("resourceRules", [])
        ),
        non_resource_rules=tuple(
            NonResourcePolicyRule(
                verbs=tuple(r.get("verbs", [])),
                non_resource_urls=tuple(r.get("nonResourceURLs", [])),
            )
            for r in rule.get("nonResourceRules", [])
        ),
    )


def _subject_from_dict(s: Mapping[str, Any]) -> Subject:
    kind = SubjectKind(s["kind"])
    if kind is SubjectKind.SERVICE_ACCOUNT:
        sa = s["serviceAccount"]
        return Subject(kind, sa["name"], sa["namespace"])
    return Subject(kind, s["user" if kind is SubjectKind.USER else "group"]["name"])


def priority_level_from_dict(obj: Mapping[str, Any]) -> PriorityLevelConfiguration:
    return PriorityLevelConfiguration(
        meta_from_dict(obj.get("metadata", {})), pl_spec_from_dict(obj["spec"])
    )


def pl_spec_from_dict(spec: Mapping[str, Any]) -> PriorityLevelConfigurationSpec:
    limited = spec.get("limited")
    exempt = spec.get("exempt")
    return PriorityLevelConfigurationSpec(
        type=PriorityLevelType(spec["type"]),
        limited=None if limited is None else _limited_from_dict(limited),
        exempt=None
        if exempt is None
        else ExemptPriorityLevelConfiguration(
            nominal_concurrency_shares=exempt["nominalConcurrencyShares"],
            lendable_percent=exempt["lendablePercent"],
        ),
    )


def _limited_from_dict(lim: Mapping[str, Any]) -> LimitedPriorityLevelConfiguration:
    lr = lim["limitResponse"]
    q = lr.get("queuing")
    return LimitedPriorityLevelConfiguration(
        nominal_concurrency_shares=lim["nominalConcurrencyShares"],
        limit_response=LimitResponse(
            LimitResponseType(lr["type"]),
            None
            if q is None
            else QueuingConfiguration(q["queues"], q["handSize"], q["queueLengthLimit"]),
        ),
        lendable_percent=lim["lendablePercent"],
        borrowing_limit_percent=lim.get("borrowingLimitPercent"),
    )
