"""Issue 21: a tenant's pod template cannot claim the platform's labels nor security-relevant
fields unless the operator allows them; refused at PUT with 400 naming the field (on a real
router, whatever the backend), and the same rule is what the Kubernetes renderer applies."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from platform_support import Platform, action_url

from gateway.cli.main import main
from gateway.platform.actions import validate_put
from gateway.platform.errors import ApiError
from gateway.platform.podtemplate import parse_allowed, review

CODE = {"kind": "python:3.11", "code": "def main(a): return a"}
APPARMOR = "container.apparmor.security.beta.kubernetes.io/runtime"

# (template, the field path the 400 must name)
HOSTILE: list[tuple[dict[str, Any], str]] = [
    (
        {"metadata": {"labels": {"app.kubernetes.io/name": "apf-gateway-frontdoor"}}},
        "podTemplate.metadata.labels.app.kubernetes.io/name",
    ),
    (
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "someone"}}},
        "podTemplate.metadata.labels.app.kubernetes.io/managed-by",
    ),
    (
        {"metadata": {"labels": {"apf-gateway.dev/safe-to-evict": "false"}}},
        "podTemplate.metadata.labels.apf-gateway.dev/safe-to-evict",
    ),
    (
        {"metadata": {"annotations": {"x.apf-gateway.dev/labels": "{}"}}},
        "podTemplate.metadata.annotations.x.apf-gateway.dev/labels",
    ),
    (
        {"metadata": {"annotations": {APPARMOR: "unconfined"}}},
        f"podTemplate.metadata.annotations.{APPARMOR}",
    ),
    (
        {"metadata": {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}},
        "podTemplate.metadata.annotations.seccomp.security.alpha.kubernetes.io/pod",
    ),
    ({"spec": {"priorityClassName": "system-node-critical"}}, "podTemplate.spec.priorityClassName"),
    ({"spec": {"tolerations": [{"operator": "Exists"}]}}, "podTemplate.spec.tolerations"),
    ({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}}, "podTemplate.spec.nodeSelector"),
    ({"spec": {"nodeName": "control-plane"}}, "podTemplate.spec.nodeName"),
    ({"spec": {"hostNetwork": True}}, "podTemplate.spec.hostNetwork"),
    ({"spec": {"hostPID": True}}, "podTemplate.spec.hostPID"),
    (
        {"spec": {"serviceAccountName": "apf-gateway-manager"}},
        "podTemplate.spec.serviceAccountName",
    ),
    ({"spec": {"securityContext": {"runAsUser": 0}}}, "podTemplate.spec.securityContext"),
    (
        {"spec": {"containers": [{"name": "runtime", "securityContext": {"privileged": True}}]}},
        "podTemplate.spec.containers",
    ),
    (
        {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}},
        "podTemplate.spec.volumes",
    ),
    ({"metadata": {"namespace": "kube-system"}}, "podTemplate.metadata.namespace"),
]


@pytest.mark.parametrize(("template", "field"), HOSTILE, ids=[f for _, f in HOSTILE])
def test_every_hostile_field_is_refused_by_name(template: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as exc:
        validate_put("guest", "a", {"exec": CODE, "podTemplate": template})
    assert exc.value.status == 400
    assert exc.value.message.startswith(field + ":") or exc.value.message.startswith(field + " ")
    clean, problems = review(template, frozenset())
    assert clean == {} and len(problems) == 1  # what the Kubernetes renderer keeps: nothing


def test_the_operator_allows_fields_one_by_one() -> None:
    allowed = parse_allowed(
        ["spec.tolerations,spec.priorityClassName", f"metadata.annotations.{APPARMOR}"]
    )
    template = {
        "metadata": {"labels": {"team": "payments"}, "annotations": {APPARMOR: "unconfined"}},
        "spec": {"tolerations": [{"operator": "Exists"}], "priorityClassName": "batch"},
    }
    doc = validate_put(
        "guest", "a", {"exec": CODE, "podTemplate": template}, allowed_template_fields=allowed
    )
    assert doc["podTemplate"] == template
    # allowing one field is not allowing another
    with pytest.raises(ApiError, match=r"podTemplate\.spec\.hostNetwork"):
        validate_put(
            "guest",
            "a",
            {"exec": CODE, "podTemplate": {"spec": {"hostNetwork": True}}},
            allowed_template_fields=allowed,
        )
    # a tenant's own labels and the autoscaler's eviction hint need no permission
    plain = {
        "metadata": {
            "labels": {"team": "payments"},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
        }
    }
    assert validate_put("guest", "b", {"exec": CODE, "podTemplate": plain})["podTemplate"] == plain


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("metadata.labels.app.kubernetes.io/name", "platform's own keys"),
        ("metadata.annotations.apf-gateway.dev/labels", "not a pod template field"),
        ("spec.containers", "not a pod template field"),
        ("spec.volumes", "not a pod template field"),
        ("metadata.labels.team", "not a pod template field"),  # needs no permission
    ],
)
def test_what_can_never_be_allowed(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_allowed([entry])


def test_a_router_refuses_a_bad_allow_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["router", "--allow-pod-template-field", "spec.containers"]) == 2
    assert "spec.containers: not a pod template field" in capsys.readouterr().err


FRONT_DOOR_LABELS = {"metadata": {"labels": {"app.kubernetes.io/name": "apf-gateway-frontdoor"}}}
NODE_CRITICAL = {
    "metadata": {"annotations": {APPARMOR: "unconfined"}},
    "spec": {"priorityClassName": "system-node-critical", "tolerations": [{"operator": "Exists"}]},
}


async def test_a_real_router_refuses_hostile_templates_at_put(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    """The PUTs of the issue, on a router with the local backend: 400 in OpenWhisk's error
    shape naming the field, and nothing stored."""
    platform.start_manager()
    r = platform.start_router("r1")
    for name, template, field in (
        ("door", FRONT_DOOR_LABELS, "podTemplate.metadata.labels.app.kubernetes.io/name"),
        ("crit", NODE_CRITICAL, "podTemplate.spec.priorityClassName"),
    ):
        url = action_url(r, name)
        resp = await client.put(url, json={"exec": CODE, "podTemplate": template})
        assert resp.status_code == 400, resp.text
        body = resp.json()
        assert set(body) == {"error", "code"} and field in body["error"]
        assert (await client.get(url)).status_code == 404


async def test_a_router_accepts_what_its_operator_allows(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    allow = "spec.priorityClassName,spec.tolerations"
    r = platform.start_router(
        "r1",
        "--allow-pod-template-field",
        allow,
        "--allow-pod-template-field",
        f"metadata.annotations.{APPARMOR}",
    )
    resp = await client.put(
        action_url(r, "crit"), json={"exec": CODE, "podTemplate": NODE_CRITICAL}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["podTemplate"] == NODE_CRITICAL
    # the platform's labels stay refused whatever is allowed
    door = await client.put(
        action_url(r, "door"), json={"exec": CODE, "podTemplate": FRONT_DOOR_LABELS}
    )
    assert door.status_code == 400 and "app.kubernetes.io/name" in door.json()["error"]
