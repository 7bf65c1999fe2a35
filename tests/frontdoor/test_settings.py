"""GatewayConfiguration documents and flags: errors name file, document and field path."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.settings.guard import unstated_changes
from gateway.settings.sources import ConfigLoadError, load_config

HEADER = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"


def test_errors_name_file_document_and_field(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n"
        "metadata: {name: p}\nspec: {type: Exempt}\n---\n" + HEADER
        + "upstreams: [{url: 'ftp://x', prefx: /}]\nproxy: {readTimeout: 10x}\n"
        "maxRequestsInflight: many\n"
    )  # fmt: skip
    with pytest.raises(ConfigLoadError) as exc:
        load_config([f])
    errors = exc.value.errors
    where = f"{f}: document 2"
    assert f"{where}: upstreams[0].prefx: unknown field" in errors
    assert f"{where}: maxRequestsInflight: expected an integer, got 'many'" in errors
    assert any(e.startswith(f"{where}: proxy.readTimeout: expected seconds") for e in errors)


def test_flags_override_documents_and_defaults(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(HEADER + "maxRequestsInflight: 7\nlisten: 127.0.0.1:9000\n"
                 "upstreams: [{url: 'http://127.0.0.1:1'}]\n")  # fmt: skip
    args = build_parser().parse_args([
        "serve", "--config", str(f), "--max-mutating-requests-inflight", "3",
        "--enable-priority-and-fairness=false", "--requestheader-allowed-cidrs",
        "10.0.0.0/8,127.0.0.1", "--upstream", "/v2=http://127.0.0.1:2", "--request-timeout",
        "30s", "--route-template", "/v2/{namespace}/items/{name}=items",
    ])  # fmt: skip
    loaded = load_config(args.config, overrides_from_args(args))
    s = loaded.settings
    assert (s.max_requests_inflight, s.max_mutating_requests_inflight) == (7, 3)
    assert s.listen == "127.0.0.1:9000" and s.request_timeout == 30.0
    assert not s.enable_priority_and_fairness
    assert s.authentication.request_header.allowed_cidrs == ("10.0.0.0/8", "127.0.0.1")
    assert [(u.prefix, u.url) for u in s.upstreams] == [("/v2", "http://127.0.0.1:2")]
    assert s.route_templates[0].resource == "items"
    assert loaded.flow is None  # no objects given: bootstrap defaults apply


def test_work_estimation_settings_are_validated(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(HEADER + "upstreams: [{url: 'http://127.0.0.1:1'}]\n"
                 "workEstimation: {listLearningInterval: -1, maximumListSeats: 0}\n")  # fmt: skip
    with pytest.raises(ConfigLoadError) as exc:
        load_config([f])
    errors = exc.value.errors
    assert f"{f}: document 1: workEstimation.listLearningInterval: must not be negative" in errors
    assert f"{f}: document 1: workEstimation.maximumListSeats: must be at least 1" in errors
    f.write_text(HEADER + "upstreams: [{url: 'http://127.0.0.1:1'}]\n"
                 "workEstimation: {listLearningInterval: 250ms}\n")  # fmt: skip
    assert load_config([f]).settings.work_estimation.list_learning_interval == 0.25


def test_bad_flag_value_is_reported() -> None:
    args = build_parser().parse_args(["serve", "--max-requests-inflight", "x",
                                      "--upstream", "http://127.0.0.1:1"])  # fmt: skip
    with pytest.raises(ConfigLoadError, match="maxRequestsInflight: expected an integer"):
        load_config([], overrides_from_args(args))


def test_serve_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    for flag in ("--config", "--upstream", "--listen", "--max-requests-inflight",
                 "--max-mutating-requests-inflight", "--enable-priority-and-fairness",
                 "--token-auth-file", "--openwhisk-keys-file", "--anonymous-auth"):  # fmt: skip
        assert flag in out


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("upstreams: [{prefix: /v2}]\n", "upstreams[0].url: required"),
        ("requestTimeout: 0\n", "requestTimeout: must be positive"),
        ("requestTimeout: 0s\n", "requestTimeout: must be positive"),
        ("requestTimeout: .nan\n", "requestTimeout: expected seconds or a duration like '15s'"),
        ("shutdownGracePeriod: 1e999\n", "shutdownGracePeriod: expected seconds or a duration"),
        ("listen: '127.0.0.1:\u00b2'\n", "listen: expected HOST:PORT"),
        ("maxConfigBytes: 0\n", "maxConfigBytes: must be at least 1"),
    ],
)  # fmt: skip
def test_bad_values_are_field_errors_not_tracebacks(tmp_path: Path, body: str, error: str) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(HEADER + body)
    with pytest.raises(ConfigLoadError) as exc:
        load_config([f])
    assert any(e.startswith(f"{f}: document 1: {error}") for e in exc.value.errors), exc.value


def test_the_flags_set_the_size_limits_of_the_files(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(HEADER + "#" + "x" * 5000 + "\n")
    args = build_parser().parse_args(["serve", "--config", str(f), "--max-config-bytes", "4096"])
    with pytest.raises(ConfigLoadError) as exc:
        load_config(args.config, overrides_from_args(args))
    assert exc.value.reason == "too_large"
    assert exc.value.errors == [
        f"{f}: the configuration files together are larger than 4096 bytes (maxConfigBytes)"
    ]
    assert load_config([f]).settings.max_config_bytes == 2 << 20


def test_reload_guard_names_each_security_setting_changed_by_omission(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(HEADER + "authentication: {anonymous: false}\ndebugAllowedGroups: [ops]\n"
                 "maxRequestsInflight: 7\n")  # fmt: skip
    running = load_config([f]).settings
    f.write_text(HEADER + "maxRequestsInflight: 8\n")
    assert unstated_changes(running, load_config([f])) == [
        f'{f}: document 1: debugAllowedGroups: key missing; the running value ["ops"] would '
        'become the default ["system:masters"]. A reload changes security settings only when '
        "the key is written (or restart)",
        f"{f}: document 1: authentication.anonymous: key missing; the running value false would "
        "become the default true. A reload changes security settings only when the key is "
        "written (or restart)",
    ]
    # A flag states its key too; a stated change, even to the default, is allowed.
    f.write_text(HEADER + "debugAllowedGroups: [system:masters]\n")
    assert (
        unstated_changes(running, load_config([f], {"authentication": {"anonymous": False}})) == []
    )
    f.write_text(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n"
        "metadata: {name: p}\nspec: {type: Limited, limited: {limitResponse: {type: Reject}}}\n"
    )
    refused = unstated_changes(running, load_config([f]))
    assert [e.split(": key")[0] for e in refused] == [
        "no GatewayConfiguration document: debugAllowedGroups",
        "no GatewayConfiguration document: authentication.anonymous",
    ]
