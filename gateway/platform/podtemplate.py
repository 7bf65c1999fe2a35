"""What a tenant's pod template may set (issue 21), one rule for two places: the action API
refuses a PUT that breaks it (400 naming the field, on every backend), and the Kubernetes
backend drops what breaks it when it renders the pod (a document stored before the rule, or a
check bypassed), so a tenant pod can never look like a platform pod.

- Never: labels or annotations in the platform's key spaces (``app.kubernetes.io/*``,
  ``apf-gateway.dev/*`` and its subdomains), which the shipped NetworkPolicies, Services and
  the PodDisruptionBudget select on; pod fields outside ``ALLOWABLE_SPEC`` (containers,
  volumes, ...; the runtime container is the platform's).
- Only where the operator allows the field (``FIELD`` below, e.g. ``spec.tolerations`` or
  ``metadata.annotations.container.apparmor.security.beta.kubernetes.io/runtime``): the
  scheduling and security fields of ``ALLOWABLE_SPEC``, and labels or annotations in
  Kubernetes' own key spaces (``kubernetes.io``, ``k8s.io`` and subdomains: AppArmor,
  seccomp, Pod Security, ...).
- Always: other labels and annotations, and the cluster autoscaler's ``safe-to-evict``
  annotation (Agones lets game servers set it; ``eviction.py`` maps it to the policy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

PLATFORM_DOMAINS = ("app.kubernetes.io", "apf-gateway.dev")
KUBERNETES_DOMAINS = ("kubernetes.io", "k8s.io")
ALWAYS_ALLOWED = frozenset({"metadata.annotations.cluster-autoscaler.kubernetes.io/safe-to-evict"})
# Pod fields an operator may let tenants set, and the JSON type each must have.
ALLOWABLE_SPEC: dict[str, type] = {
    "nodeSelector": dict,
    "nodeName": str,
    "affinity": dict,
    "tolerations": list,
    "topologySpreadConstraints": list,
    "priorityClassName": str,
    "runtimeClassName": str,
    "schedulerName": str,
    "serviceAccountName": str,
    "hostNetwork": bool,
    "hostPID": bool,
    "hostIPC": bool,
    "hostUsers": bool,
    "securityContext": dict,
}
_TYPE_NAMES = {dict: "an object", list: "a list of objects", str: "a string", bool: "a boolean"}
FLAG = "--allow-pod-template-field"


def _in(domain: str, spaces: Iterable[str]) -> bool:
    return any(domain == d or domain.endswith("." + d) for d in spaces)


def is_platform_key(key: str) -> bool:
    """A label or annotation key of the platform's (never a tenant's)."""
    domain, sep, _ = key.rpartition("/")
    return bool(sep) and _in(domain, PLATFORM_DOMAINS)


def is_kubernetes_key(key: str) -> bool:
    domain, sep, _ = key.rpartition("/")
    return bool(sep) and _in(domain, KUBERNETES_DOMAINS)


def parse_allowed(entries: Iterable[str]) -> frozenset[str]:
    """The operator's allow-list; ``ValueError`` names an entry that cannot be allowed."""
    out = set()
    for raw in entries:
        for entry in (e.strip() for e in raw.split(",")):
            if not entry:
                continue
            part, _, rest = entry.partition(".")
            if part == "spec" and rest in ALLOWABLE_SPEC:
                out.add(entry)
                continue
            kind, _, key = rest.partition(".")
            if part == "metadata" and kind in ("labels", "annotations") and is_kubernetes_key(key):
                if is_platform_key(key):
                    raise ValueError(
                        f"{entry}: the platform's own keys ({', '.join(PLATFORM_DOMAINS)}) "
                        "cannot be allowed to tenants"
                    )
                out.add(entry)
                continue
            raise ValueError(
                f"{entry}: not a pod template field that can be allowed; one of "
                f"{', '.join('spec.' + f for f in ALLOWABLE_SPEC)}, or "
                "metadata.labels.KEY / metadata.annotations.KEY for a key in "
                f"{' or '.join(KUBERNETES_DOMAINS)}"
            )
    return frozenset(out)


def review(template: Any, allowed: frozenset[str]) -> tuple[dict[str, Any], list[str]]:
    """``(what of template may be used, one message per refused part)``; each message starts
    with the refused field's path (``podTemplate.spec.tolerations``)."""
    problems: list[str] = []
    if not isinstance(template, dict):
        return {}, ["podTemplate must be an object"]
    clean: dict[str, Any] = {}
    for part, value in template.items():
        review_part = _PARTS.get(part)
        if review_part is None:
            problems.append(f"podTemplate.{part}: a pod template may set only metadata and spec")
        elif value is not None and not isinstance(value, dict):
            problems.append(f"podTemplate.{part} must be an object")
        else:
            kept = review_part(value or {}, allowed, problems)
            if kept:
                clean[part] = kept
    return clean, problems


def _metadata(
    value: dict[str, Any], allowed: frozenset[str], problems: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, mapping in value.items():
        where = f"podTemplate.metadata.{kind}"
        if kind not in ("labels", "annotations"):
            problems.append(f"{where}: a pod template may set only labels and annotations")
            continue
        if mapping is None:
            continue
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            problems.append(f"{where} must map strings to strings")
            continue
        kept = {}
        for key, text in mapping.items():
            field = f"metadata.{kind}.{key}"
            if is_platform_key(key):
                problems.append(
                    f"podTemplate.{field}: {key.rpartition('/')[0]} is the platform's key "
                    "space (the manifests select pods on it)"
                )
            elif is_kubernetes_key(key) and field not in allowed and field not in ALWAYS_ALLOWED:
                problems.append(_not_allowed(field, "a key in Kubernetes' own key space"))
            else:
                kept[key] = text
        if kept:
            out[kind] = kept
    return out


def _spec(value: dict[str, Any], allowed: frozenset[str], problems: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, item in value.items():
        where = f"podTemplate.spec.{name}"
        want = ALLOWABLE_SPEC.get(name)
        if want is None:
            problems.append(f"{where}: not a field a tenant's pod template may set")
        elif f"spec.{name}" not in allowed:
            problems.append(_not_allowed(f"spec.{name}", "a scheduling or security field"))
        elif not _typed(item, want, name):
            problems.append(f"{where} must be {_TYPE_NAMES[want]}")
        else:
            out[name] = item
    return out


_PARTS: dict[str, Callable[[dict[str, Any], frozenset[str], list[str]], dict[str, Any]]] = {
    "metadata": _metadata,
    "spec": _spec,
}


def _typed(item: Any, want: type, name: str) -> bool:
    if isinstance(item, list):
        return want is list and all(isinstance(i, dict) for i in item)
    if isinstance(item, dict) and name == "nodeSelector":
        return all(isinstance(k, str) and isinstance(v, str) for k, v in item.items())
    return isinstance(item, want)


def _not_allowed(field: str, what: str) -> str:
    return (
        f"podTemplate.{field}: {what}, which a tenant may set only where the operator "
        f"allows it ({FLAG} {field})"
    )
