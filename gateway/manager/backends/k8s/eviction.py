"""``eviction.safe`` on Pods, exactly as Agones maps it (platform-reference section 6).

| safe          | annotation (1) | label (2)                                    |
|---------------|----------------|----------------------------------------------|
| ``Never``     | ``"false"``    | ``"false"`` (selected by the PDB)            |
| ``OnUpgrade`` | ``"false"``    | ``"true"``                                   |
| ``Always``    | ``"true"``     | ``"true"``                                   |

(1) ``cluster-autoscaler.kubernetes.io/safe-to-evict``, (2) ``apf-gateway.dev/safe-to-evict``.

Values already present in the pod template win (with a warning), and a template annotation
``safe-to-evict: "true"`` forces ``Always`` (Agones' backward compatibility rule). The PDB has
``maxUnavailable: 0`` and selects the ``"false"`` label, so the Eviction API refuses (429) to
disrupt ``Never`` pods while plain DELETE (the manager's own removal) is unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.platform.actions import EvictionSafe

CA_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_LABEL = "apf-gateway.dev/safe-to-evict"
POLICY_ANNOTATION = "apf-gateway.dev/eviction-safe"  # the effective policy, for people
PDB_NAME = "apf-gateway-safe-to-evict-false"


@dataclass(frozen=True, slots=True)
class EvictionMetadata:
    safe: EvictionSafe  # the effective policy
    labels: dict[str, str]
    annotations: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def desired(safe: EvictionSafe) -> tuple[str, str]:
    """``(annotation, label)`` values for a policy."""
    annotation = "true" if safe is EvictionSafe.ALWAYS else "false"
    label = "false" if safe is EvictionSafe.NEVER else "true"
    return annotation, label


def apply_eviction(
    safe: EvictionSafe,
    template_labels: dict[str, str],
    template_annotations: dict[str, str],
) -> EvictionMetadata:
    """The labels and annotations a pod gets, template values first."""
    warnings: list[str] = []
    effective = safe
    if template_annotations.get(CA_ANNOTATION) == "true" and safe is not EvictionSafe.ALWAYS:
        warnings.append(
            f'pod template annotation {CA_ANNOTATION}: "true" implies eviction.safe Always '
            f"(the action says {safe.value})"
        )
        effective = EvictionSafe.ALWAYS
    want_annotation, want_label = desired(effective)
    annotations = dict(template_annotations)
    labels = dict(template_labels)
    for kind, store, key, want in (
        ("annotation", annotations, CA_ANNOTATION, want_annotation),
        ("label", labels, SAFE_LABEL, want_label),
    ):
        have = store.get(key)
        if have is None:
            store[key] = want
        elif have != want:
            warnings.append(
                f"pod template {kind} {key}: {have!r} kept; eviction.safe "
                f"{effective.value} would set {want!r}"
            )
    annotations[POLICY_ANNOTATION] = effective.value
    return EvictionMetadata(effective, labels, annotations, warnings)


def pdb_body(namespace: str, common_labels: dict[str, str]) -> dict[str, Any]:
    """The one PodDisruptionBudget per namespace that protects ``Never`` pods."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": PDB_NAME, "namespace": namespace, "labels": dict(common_labels)},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {SAFE_LABEL: "false"}}},
    }
