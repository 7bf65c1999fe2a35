"""``flowcontrol.apiserver.k8s.io/v1`` FlowSchema and PriorityLevelConfiguration as frozen values.

Field names follow the Kubernetes API in snake_case; ``gateway.flowcontrol.config`` converts
from and to the camelCase YAML. Values here are already defaulted (see ``defaults``); an object
that exists is one that validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

MANDATORY_PL_EXEMPT = "exempt"
MANDATORY_PL_CATCH_ALL = "catch-all"
MANDATORY_FS_EXEMPT = "exempt"
MANDATORY_FS_CATCH_ALL = "catch-all"
AUTOUPDATE_ANNOTATION = "apf.kubernetes.io/autoupdate-spec"
FLOW_SCHEMA_MAX_MATCHING_PRECEDENCE = 10000

# Kubernetes defaults (pkg/apis/flowcontrol/v1/defaults.go).
DEFAULT_NOMINAL_CONCURRENCY_SHARES = 30
DEFAULT_QUEUES = 64
DEFAULT_HAND_SIZE = 8
DEFAULT_QUEUE_LENGTH_LIMIT = 50
DEFAULT_MATCHING_PRECEDENCE = 1000


class PriorityLevelType(StrEnum):
    EXEMPT = "Exempt"
    LIMITED = "Limited"


class LimitResponseType(StrEnum):
    QUEUE = "Queue"
    REJECT = "Reject"


class SubjectKind(StrEnum):
    USER = "User"
    GROUP = "Group"
    SERVICE_ACCOUNT = "ServiceAccount"


class DistinguisherMethod(StrEnum):
    BY_USER = "ByUser"
    BY_NAMESPACE = "ByNamespace"


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    annotations: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()

    def annotation(self, key: str) -> str | None:
        for k, v in self.annotations:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class QueuingConfiguration:
    queues: int = DEFAULT_QUEUES
    hand_size: int = DEFAULT_HAND_SIZE
    queue_length_limit: int = DEFAULT_QUEUE_LENGTH_LIMIT


@dataclass(frozen=True, slots=True)
class LimitResponse:
    type: LimitResponseType
    queuing: QueuingConfiguration | None = None


@dataclass(frozen=True, slots=True)
class LimitedPriorityLevelConfiguration:
    nominal_concurrency_shares: int = DEFAULT_NOMINAL_CONCURRENCY_SHARES
    limit_response: LimitResponse = LimitResponse(LimitResponseType.REJECT)
    lendable_percent: int = 0
    # None means "no limit" (may borrow up to the server limit).
    borrowing_limit_percent: int | None = None


@dataclass(frozen=True, slots=True)
class ExemptPriorityLevelConfiguration:
    nominal_concurrency_shares: int = 0
    lendable_percent: int = 0


@dataclass(frozen=True, slots=True)
class PriorityLevelConfigurationSpec:
    type: PriorityLevelType
    limited: LimitedPriorityLevelConfiguration | None = None
    exempt: ExemptPriorityLevelConfiguration | None = None


@dataclass(frozen=True, slots=True)
class PriorityLevelConfiguration:
    metadata: ObjectMeta
    spec: PriorityLevelConfigurationSpec

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True, slots=True)
class Subject:
    kind: SubjectKind
    # The one member that matches ``kind``: user/group name, or (namespace, name) for a SA.
    name: str
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class ResourcePolicyRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    cluster_scope: bool = False
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NonResourcePolicyRule:
    verbs: tuple[str, ...]
    non_resource_urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PolicyRulesWithSubjects:
    subjects: tuple[Subject, ...]
    resource_rules: tuple[ResourcePolicyRule, ...] = ()
    non_resource_rules: tuple[NonResourcePolicyRule, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowSchemaCondition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


@dataclass(frozen=True, slots=True)
class FlowSchemaSpec:
    priority_level_name: str
    matching_precedence: int = DEFAULT_MATCHING_PRECEDENCE
    distinguisher_method: DistinguisherMethod | None = None
    rules: tuple[PolicyRulesWithSubjects, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowSchema:
    metadata: ObjectMeta
    spec: FlowSchemaSpec
    conditions: tuple[FlowSchemaCondition, ...] = field(default=(), compare=False)

    @property
    def name(self) -> str:
        return self.metadata.name
