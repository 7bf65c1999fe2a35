"""Action documents: validation with clear messages, defaults, the typed view."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.manager.model import ActionSpec
from gateway.platform.actions import ActionInfo, EvictionSafe, validate_put
from gateway.platform.errors import ApiError
from gateway.platform.ids import is_activation_id, new_activation_id

CODE = {"kind": "python:3.11", "code": "def main(a): return a"}


def test_defaults_and_typed_view() -> None:
    doc = validate_put("guest", "hello", {"exec": CODE, "parameters": [{"key": "k", "value": 1}]})
    assert doc["limits"] == {
        "timeout": 60000,
        "memory": 256,
        "logs": 10,
        "concurrency": 1,
        "instances": 30,
    }
    assert doc["eviction"] == {"safe": "Never"}
    info = ActionInfo.from_doc(doc)
    assert info.key == "guest/hello@0.0.1" and info.parameters == {"k": 1}
    assert info.eviction is EvictionSafe.NEVER and info.main == "main"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "expected a JSON object"),
        ({}, "'exec' is required"),
        ({"exec": {"kind": "nodejs:20", "code": "x"}}, "not supported"),
        # kind labels metric series: a free-form suffix would mint one per action
        ({"exec": {"kind": "python:3-" + "x" * 5000, "code": "x"}}, "python:3-xxx"),
        ({"exec": {"kind": "python:3.11a", "code": "x"}}, "not supported"),
        ({"exec": {"kind": "python:3.123", "code": "x"}}, "not supported"),
        ({"exec": {"kind": "python:3"}}, "'exec.code' is required"),
        ({"exec": {**CODE, "main": "not a name"}}, "'exec.main'"),
        ({"exec": CODE, "limits": {"timeout": 50}}, "limits.timeout must be an integer in [100"),
        ({"exec": CODE, "limits": {"concurrency": True}}, "limits.concurrency"),
        ({"exec": CODE, "limits": {"cpu": 1}}, "Unknown limit 'cpu'"),
        ({"exec": CODE, "eviction": {"safe": "Sometimes"}}, "eviction.safe must be one of"),
        ({"exec": CODE, "parameters": {"k": 1}}, "'parameters' must be a list"),
        ({"exec": {**CODE, "image": "no spaces"}}, "exec.image must be"),
        ({"exec": CODE, "eviction": {"terminationGracePeriodSeconds": -1}}, "[0, 3600]"),
        ({"exec": CODE, "eviction": {"grace": 1}}, "Unknown eviction field(s): grace"),
        ({"exec": CODE, "podTemplate": {"spec": {"volumes": []}}}, "podTemplate.spec.volumes: "),
        ({"exec": CODE, "podTemplate": {"status": {}}}, "podTemplate.status: "),
        ({"exec": CODE, "podTemplate": {"metadata": {"labels": {"a": 1}}}}, "map strings"),
    ],
)
def test_bad_documents_are_400_with_a_reason(body: Any, message: str) -> None:
    with pytest.raises(ApiError) as exc:
        validate_put("guest", "a", body)
    assert exc.value.status == 400 and message in exc.value.message


def test_bad_name() -> None:
    with pytest.raises(ApiError, match="not a valid action name"):
        validate_put("guest", "../x", {"exec": CODE})


def test_activation_ids() -> None:
    aid = new_activation_id()
    assert is_activation_id(aid) and len(aid) == 32
    assert not is_activation_id(aid.upper()) and not is_activation_id(aid[:-1])


def test_runtime_fields_travel_from_the_document_to_the_manager() -> None:
    """exec.image, the grace period and the pod template reach the manager's ActionSpec (and
    survive its JSON, the container label a restarted manager reads)."""

    template = {
        "metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}},
        "spec": {"nodeSelector": {"pool": "actions"}},
    }
    body = {
        "exec": {**CODE, "image": "openwhisk/action-python-v3.11:1.0"},
        "eviction": {"safe": "Never", "terminationGracePeriodSeconds": 120},
        "podTemplate": template,
    }
    allowed = frozenset({"spec.nodeSelector"})  # the operator lets tenants choose nodes
    doc = validate_put("guest", "a", body, allowed_template_fields=allowed)
    # Agones: a template saying safe-to-evict "true" makes the policy Always
    assert doc["eviction"] == {"safe": "Always", "terminationGracePeriodSeconds": 120}
    spec = ActionInfo.from_doc(doc).spec()
    assert (spec.image, spec.grace_seconds, spec.pod_template) == (
        "openwhisk/action-python-v3.11:1.0",
        120,
        template,
    )
    assert spec.eviction is EvictionSafe.ALWAYS
    assert type(spec) is ActionSpec  # no code or parameters in the manager's view
    again = ActionSpec.from_json(spec.to_json())
    assert again == spec and again.pod_template == template
    plain = ActionInfo.from_doc(validate_put("guest", "b", {"exec": CODE})).spec()
    assert set(plain.to_json()) == {"namespace", "name", "version", "kind", "memory",
                                    "concurrency", "timeout", "instances", "eviction"}  # fmt: skip


@pytest.mark.parametrize("kind", ["python:3", "python:3.11", "python:3.9", "python:default"])
def test_supported_kinds_are_accepted(kind: str) -> None:
    doc = validate_put("guest", "a", {"exec": {**CODE, "kind": kind}})
    assert doc["exec"]["kind"] == kind


def test_a_rejected_kind_is_shown_cut_short() -> None:
    with pytest.raises(ApiError) as exc:
        validate_put("guest", "a", {"exec": {"kind": "python:3-" + "x" * 5000, "code": "x"}})
    assert len(exc.value.message) < 200
