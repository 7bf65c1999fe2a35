"""Every Kubernetes API call the manager makes, as one table.

The client wrapper (``api.KubeApi``) looks each call up here before making it, the RBAC Role in
``deploy/`` must grant exactly these ``(apiGroup, resource, verb)`` triples, and the tests check
both directions (the fake API server records what was really called).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiCall:
    verb: str  # the RBAC verb
    group: str  # "" is the core group
    resource: str  # plural, with "/subresource" when there is one


API_CALLS: dict[str, ApiCall] = {
    "list_pods": ApiCall("list", "", "pods"),
    "watch_pods": ApiCall("watch", "", "pods"),
    "create_pod": ApiCall("create", "", "pods"),
    "patch_pod": ApiCall("patch", "", "pods"),
    "delete_pod": ApiCall("delete", "", "pods"),
    "evict_pod": ApiCall("create", "", "pods/eviction"),
    "get_pdb": ApiCall("get", "policy", "poddisruptionbudgets"),
    "create_pdb": ApiCall("create", "policy", "poddisruptionbudgets"),
    "get_deployment": ApiCall("get", "apps", "deployments"),
    "get_lease": ApiCall("get", "coordination.k8s.io", "leases"),
    "create_lease": ApiCall("create", "coordination.k8s.io", "leases"),
    "update_lease": ApiCall("update", "coordination.k8s.io", "leases"),
}


def rbac_triples() -> set[tuple[str, str, str]]:
    """``{(apiGroup, resource, verb)}`` the manager's Role must grant."""
    return {(c.group, c.resource, c.verb) for c in API_CALLS.values()}
