# ruff: noqa: E501
"""``apf-gateway config validate|defaults`` as a user runs them: real subprocesses, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from config_testlib import dump, fs_doc, pl_doc, queuing

from gateway.apfconfig import bootstrap
from gateway.apfconfig.loader import load_text

FIXTURES = Path(__file__).parent / "fixtures"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "config", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_validate_valid_files_exits_zero_with_summary(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        dump(pl_doc("mine"), fs_doc("mine", priorityLevelConfiguration={"name": "mine"}))
    )
    proc = cli("validate", str(tmp_path), str(FIXTURES / "kubectl-get-flowcontrol.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "valid: 12 FlowSchemas, 9 PriorityLevelConfigurations" in proc.stdout
    assert (
        "effective (after the ensurer): 12 FlowSchemas, 9 PriorityLevelConfigurations, 0 changes"
        in proc.stdout
    )
    assert proc.stderr == ""


def test_validate_lists_every_error_and_exits_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(dump(fs_doc("Bad", matchingPrecedence=1), pl_doc("foo", **queuing(handSize=70))))
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    proc = cli("validate", str(bad), str(broken))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert (
        f'{bad}: document 1 (FlowSchema "Bad"): metadata.name: Invalid value: "Bad": a lowercase RFC 1123 subdomain'
        in lines[0]
    )
    assert (
        lines[1]
        == f"{bad}: document 1 (FlowSchema \"Bad\"): spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1"
    )
    assert (
        lines[2]
        == f'{bad}: document 2 (PriorityLevelConfiguration "foo"): spec.limited.limitResponse.queuing.handSize: Invalid value: 70: should not be greater than queues (64)'
    )
    assert lines[3].startswith(f"{broken}: document 1: invalid YAML: line 2, column 1: ")
    assert lines[4] == "invalid: 4 errors"
    assert proc.stdout == ""


def test_validate_warns_about_dangling_references(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text(dump(fs_doc("orphan", priorityLevelConfiguration={"name": "nowhere"})))
    proc = cli("validate", "-v", str(f))
    assert proc.returncode == 0
    assert (
        'warning: FlowSchema "orphan" is dangling: PriorityLevelConfiguration "nowhere" does not exist, '
        "so the schema is ignored for classification"
    ) in proc.stderr
    assert (
        '  created PriorityLevelConfiguration "exempt" (mandatory object was missing)'
        in proc.stdout
    )


def test_validate_effective_prints_loadable_yaml(tmp_path: Path) -> None:
    f = tmp_path / "one.yaml"
    f.write_text(dump(pl_doc("mine")))
    proc = cli("validate", "--effective", str(f))
    assert proc.returncode == 0
    config = load_text(proc.stdout)
    assert {p.name for p in config.priority_levels} == {"mine"} | {
        p.name for p in bootstrap.defaults().priority_levels
    }


def test_defaults_prints_yaml_that_round_trips() -> None:
    proc = cli("defaults")
    assert proc.returncode == 0 and proc.stderr == ""
    assert load_text(proc.stdout) == bootstrap.defaults()
    assert all(
        d["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
        for d in yaml.safe_load_all(proc.stdout)
    )
    mandatory = cli("defaults", "--mandatory")
    assert load_text(mandatory.stdout) == bootstrap.mandatory()


def test_usage_errors_exit_two() -> None:
    assert cli().returncode == 2
    assert cli("validate").returncode == 2


GW = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"


def test_validate_reports_bad_input_as_errors_never_tracebacks(tmp_path: Path) -> None:
    cases = {
        "kind.yaml": ("kind: [1]\n", "document 1: kind: Invalid value: [1]: must be a string"),
        "gw.yaml": (GW + "upstreams: [{prefix: /v2}]\n", "document 1: upstreams[0].url: required"),
        "timeout.yaml": (
            GW + "requestTimeout: 0\n",
            "document 1: requestTimeout: must be positive",
        ),
        "deep.json": (
            "[" * 100_000 + "]" * 100_000,
            "document 1: nested more than 100 levels deep",
        ),
        "empty.yaml": ("", "holds no documents; an empty (or half-written) file is refused"),
        "bomb.yaml": (
            "a: &a [x,x,x,x,x,x,x,x,x]\n"
            + "".join(
                f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + "kind: FlowSchema\n",
            "document 1: larger than 2097152 bytes (maxConfigBytes) with YAML aliases expanded",
        ),
    }
    for name, (text, error) in cases.items():
        f = tmp_path / name
        f.write_text(text)
        proc = cli("validate", str(f))
        assert (proc.returncode, proc.stdout) == (1, ""), (name, proc.stderr)
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.splitlines()
        assert lines[0].startswith(f"{f}: {error}") and lines[1:] == ["invalid: 1 error"], lines


def test_validate_checks_the_gateway_configuration_and_caps_the_errors(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(GW + "upstreams: [{url: 'http://127.0.0.1:1'}]\nborrowingAdjustmentPeriod: 0\n")
    proc = cli("validate", str(f))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{f}: document 1: borrowingAdjustmentPeriod: must be positive",
        "invalid: 1 error",
    ]
    f.write_text(dump(*(fs_doc(f"Bad{i}") for i in range(12))))
    proc = cli("validate", "--max-config-errors", "3", str(f))
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and len(lines) == 5
    assert lines[3:] == ["... and 9 more errors", "invalid: 12 errors"]
    f.write_text(GW + "upstreams: [{url: 'http://127.0.0.1:1'}]\n")
    proc = cli("validate", str(f))
    assert proc.returncode == 0
    assert proc.stdout.startswith(
        f"valid: 0 FlowSchemas, 0 PriorityLevelConfigurations, GatewayConfiguration in {f}: document 1\n"
    )


def test_yaml_values_json_cannot_hold_are_field_errors(tmp_path: Path) -> None:
    # Issue 21 item 8: a !!binary value used to end `config validate` with a traceback.
    fs = tmp_path / "fs.yaml"
    fs.write_text(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\n"
        "metadata: {name: odd, annotations: {1: x}}\n"
        "spec:\n  matchingPrecedence: !!timestamp 2001-12-14\n"
        "  priorityLevelConfiguration: {name: global-default}\n"
        "  rules:\n  - subjects:\n    - {kind: User, user: {name: !!binary aGVsbG8=}}\n"
        "    nonResourceRules: [{verbs: !!set {get}, nonResourceURLs: ['/x']}]\n"
    )
    settings = tmp_path / "gw.yaml"
    settings.write_text(
        "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"
        "debugAllowedGroups: [!!binary aGVsbG8=]\n"
    )
    proc = cli("validate", str(settings), str(fs))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    where = f'{fs}: document 1 (FlowSchema "odd"): '
    assert proc.stderr.splitlines() == [
        f"{settings}: document 1 (GatewayConfiguration): debugAllowedGroups[0]: Invalid value: a YAML !!binary value, which JSON cannot hold",
        where + "metadata.annotations: Invalid value: 1: a key must be a string, not int",
        where
        + "spec.matchingPrecedence: Invalid value: a YAML !!timestamp value, which JSON cannot hold",
        where
        + "spec.rules[0].subjects[0].user.name: Invalid value: a YAML !!binary value, which JSON cannot hold",
        where
        + "spec.rules[0].nonResourceRules[0].verbs: Invalid value: a YAML !!set value, which JSON cannot hold",
        "invalid: 5 errors",
    ]
