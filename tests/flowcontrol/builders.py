"""Small constructors for APF objects and request digests, so tests read like the YAML they mean."""

from __future__ import annotations

from gateway.flowcontrol.digest import RequestDigest, RequestInfo, UserInfo
from gateway.flowcontrol.objects import (
    DistinguisherMethod,
    ExemptPriorityLevelConfiguration,
    FlowSchema,
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

ALL_RESOURCES = ResourcePolicyRule(("*",), ("*",), ("*",), True, ("*",))
ALL_NON_RESOURCES = NonResourcePolicyRule(("*",), ("*",))


def user(name: str) -> Subject:
    return Subject(SubjectKind.USER, name)


def group(name: str) -> Subject:
    return Subject(SubjectKind.GROUP, name)


def service_account(namespace: str, name: str) -> Subject:
    return Subject(SubjectKind.SERVICE_ACCOUNT, name, namespace)


def rule(
    *subjects: Subject,
    resource_rules: tuple[ResourcePolicyRule, ...] = (ALL_RESOURCES,),
    non_resource_rules: tuple[NonResourcePolicyRule, ...] = (ALL_NON_RESOURCES,),
) -> PolicyRulesWithSubjects:
    return PolicyRulesWithSubjects(subjects, resource_rules, non_resource_rules)


def flow_schema(
    name: str,
    level: str,
    *rules: PolicyRulesWithSubjects,
    precedence: int = 1000,
    distinguisher: DistinguisherMethod | None = DistinguisherMethod.BY_USER,
) -> FlowSchema:
    return FlowSchema(
        ObjectMeta(name), FlowSchemaSpec(level, precedence, distinguisher, tuple(rules))
    )


def queuing_level(
    name: str,
    shares: int = 30,
    *,
    queues: int = 64,
    hand_size: int = 6,
    queue_length_limit: int = 50,
    lendable_percent: int = 0,
    borrowing_limit_percent: int | None = None,
) -> PriorityLevelConfiguration:
    response = LimitResponse(
        LimitResponseType.QUEUE, QueuingConfiguration(queues, hand_size, queue_length_limit)
    )
    limited = LimitedPriorityLevelConfiguration(
        shares, response, lendable_percent, borrowing_limit_percent
    )
    return PriorityLevelConfiguration(
        ObjectMeta(name), PriorityLevelConfigurationSpec(PriorityLevelType.LIMITED, limited)
    )


def reject_level(name: str, shares: int = 30) -> PriorityLevelConfiguration:
    limited = LimitedPriorityLevelConfiguration(shares, LimitResponse(LimitResponseType.REJECT))
    return PriorityLevelConfiguration(
        ObjectMeta(name), PriorityLevelConfigurationSpec(PriorityLevelType.LIMITED, limited)
    )


def exempt_level(name: str) -> PriorityLevelConfiguration:
    return PriorityLevelConfiguration(
        ObjectMeta(name),
        PriorityLevelConfigurationSpec(
            PriorityLevelType.EXEMPT, exempt=ExemptPriorityLevelConfiguration()
        ),
    )


def resource_request(
    name: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
    *,
    verb: str = "get",
    api_group: str = "",
    resource: str = "pods",
    subresource: str = "",
    namespace: str = "default",
    object_name: str = "",
) -> RequestDigest:
    path = "/api/v1" if not api_group else f"/apis/{api_group}/v1"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{resource}"
    if object_name:
        path += f"/{object_name}"
    if subresource:
        path += f"/{subresource}"
    info = RequestInfo(
        is_resource_request=True,
        path=path,
        verb=verb,
        api_prefix="api" if not api_group else "apis",
        api_group=api_group,
        api_version="v1",
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=object_name,
    )
    return RequestDigest(UserInfo(name, groups), info)


def non_resource_request(
    path: str,
    name: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
    *,
    verb: str = "get",
) -> RequestDigest:
    return RequestDigest(UserInfo(name, groups), RequestInfo(False, path, verb))
