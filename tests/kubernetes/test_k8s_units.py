"""Pure pieces: label values, options from the environment, the eviction mapping."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cli.main import main
from gateway.manager.backends.k8s.eviction import CA_ANNOTATION, SAFE_LABEL, apply_eviction
from gateway.manager.backends.k8s.options import K8sOptions
from gateway.manager.backends.k8s.podspec import label_value
from gateway.platform.actions import EvictionSafe

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@given(st.text(max_size=300))
def test_label_values_are_always_valid(text: str) -> None:
    value = label_value(text)
    assert len(value) <= 63
    assert LABEL_VALUE.match(value)


def test_label_values_keep_valid_text_and_disambiguate_changed_text() -> None:
    assert label_value("hello") == "hello"
    assert label_value("python:3.11").startswith("python-3.11-")
    assert label_value("a b") != label_value("a-b")


def test_options_from_the_environment(tmp_path: Path) -> None:
    template = tmp_path / "template.yaml"
    template.write_text("spec:\n  nodeSelector: {pool: actions}\n")
    env = {
        "APF_K8S_NAMESPACE": "actions",
        "APF_K8S_IMAGES": "python:3.11=openwhisk/action-python-v3.11, python:3.12=x/y:1",
        "APF_K8S_RUNTIME_PORT": "9000",
        "APF_K8S_POD_TEMPLATE": str(template),
        "APF_K8S_START_TIMEOUT": "",  # empty: default
    }
    options = K8sOptions.from_env(env, runtime_port=9100)
    assert options.namespace == "actions"
    assert options.images == {
        "python:3.11": "openwhisk/action-python-v3.11",
        "python:3.12": "x/y:1",
    }
    assert options.runtime_port == 9100  # keyword arguments win
    assert options.pod_template == {"spec": {"nodeSelector": {"pool": "actions"}}}
    assert options.start_timeout == 120.0
    assert options.image_for("python:3.12") == ("x/y:1", False)
    assert options.image_for("python:3.10") == (options.image, True)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"APF_K8S_IMAGES": "python:3.11"}, "APF_K8S_IMAGES='python:3.11': expected KIND=IMAGE"),
        ({"APF_K8S_RUNTIME_PORT": "http"}, "APF_K8S_RUNTIME_PORT='http'"),
        ({"APF_K8S_POD_TEMPLATE": "/nonexistent.yaml"}, "APF_K8S_POD_TEMPLATE"),
        (
            {"APF_K8S_ALLOWED_POD_TEMPLATE_FIELDS": "spec.tolerations,spec.volumes"},
            "APF_K8S_ALLOWED_POD_TEMPLATE_FIELDS='spec.tolerations,spec.volumes': spec.volumes",
        ),
    ],
)
def test_bad_options_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        K8sOptions.from_env(env)


def test_the_pod_template_allow_list_from_the_environment_or_a_flag() -> None:
    env = {"APF_K8S_ALLOWED_POD_TEMPLATE_FIELDS": "spec.tolerations, spec.priorityClassName"}
    assert K8sOptions.from_env(env).allowed_pod_template_fields == {
        "spec.tolerations",
        "spec.priorityClassName",
    }
    given = K8sOptions.from_env(env, allowed_pod_template_fields="spec.nodeSelector")
    assert given.allowed_pod_template_fields == {"spec.nodeSelector"}  # the flag wins
    assert K8sOptions.from_env({}).allowed_pod_template_fields == frozenset()


def test_unknown_keyword_options_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown kubernetes backend options: \\['bogus'\\]"):
        K8sOptions.from_env({}, bogus=1)


@pytest.mark.parametrize(
    ("safe", "annotation", "label"),
    [
        (EvictionSafe.NEVER, "false", "false"),
        (EvictionSafe.ON_UPGRADE, "false", "true"),
        (EvictionSafe.ALWAYS, "true", "true"),
    ],
)
def test_the_agones_table(safe: EvictionSafe, annotation: str, label: str) -> None:
    meta = apply_eviction(safe, {}, {})
    assert (meta.safe, meta.annotations[CA_ANNOTATION], meta.labels[SAFE_LABEL]) == (
        safe,
        annotation,
        label,
    )
    assert meta.warnings == []


def test_template_values_win_with_a_warning() -> None:
    meta = apply_eviction(EvictionSafe.ALWAYS, {}, {CA_ANNOTATION: "false"})
    # "supports graceful termination, but no autoscaler scale-down" (Agones design discussion)
    assert meta.annotations[CA_ANNOTATION] == "false"
    assert meta.labels[SAFE_LABEL] == "true"
    assert len(meta.warnings) == 1
    forced = apply_eviction(EvictionSafe.ON_UPGRADE, {}, {CA_ANNOTATION: "true"})
    assert forced.safe is EvictionSafe.ALWAYS
    assert forced.labels[SAFE_LABEL] == "true"


def test_backend_options_from_flags_win_and_are_parsed(tmp_path: Path) -> None:
    env = {"APF_K8S_NAMESPACE": "from-env", "APF_K8S_RUNTIME_PORT": "9000"}
    options = K8sOptions.from_env(
        env, namespace="from-flag", images="python:3.11=ow/py:1", start_timeout="2.5"
    )
    assert options.namespace == "from-flag"
    assert options.runtime_port == 9000  # not given as a flag: the environment's
    assert options.images == {"python:3.11": "ow/py:1"}
    assert options.start_timeout == 2.5
    with pytest.raises(ValueError, match=re.escape("--backend-option runtime_port='http'")):
        K8sOptions.from_env({}, runtime_port="http")


def test_manager_serve_takes_backend_options_as_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["manager", "serve", "--backend", "kubernetes", "--backend-option"]
    assert main([*argv, "runtime-port=http"]) == 2
    assert "--backend-option runtime_port='http'" in capsys.readouterr().err
    assert main([*argv, "bogus=1"]) == 2
    assert "unknown kubernetes backend options: ['bogus']" in capsys.readouterr().err
    assert main(["manager", "serve", "--backend-option", "namespace=x"]) == 2
    assert "--backend-option namespace: unknown for the local backend" in capsys.readouterr().err
