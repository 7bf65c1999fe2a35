"""``serve`` applies exactly what ``apf-gateway config validate --effective`` prints: one user
FlowSchema does not cost the suggested objects, at start or on reload."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.frontdoor.conftest import ServerThread
from tests.frontdoor.test_lifecycle import ROOT, _up
from tests.support.ports import free_port
from tests.support.wait import wait_until

ADMIN = {"Authorization": "Bearer admin-token"}
BOB = {"Authorization": "Bearer bob-token"}


def user_objects(name: str, user: str) -> str:
    return f"""\
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: {name}}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse: {{type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {name}}}
spec:
  matchingPrecedence: 500
  priorityLevelConfiguration: {{name: {name}}}
  rules:
  - subjects: [{{kind: User, user: {{name: {user}}}}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
"""


def cli_effective(config: Path) -> dict[str, set[str]]:
    """What the CLI says the effective configuration is, by kind."""
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "validate", "--effective", str(config)],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    out: dict[str, set[str]] = {"FlowSchema": set(), "PriorityLevelConfiguration": set()}
    for doc in yaml.safe_load_all(proc.stdout):
        out[doc["kind"]].add(doc["metadata"]["name"])
    return out


def served_levels(url: str) -> set[str]:
    dump = httpx.get(url + "/debug/api_priority_and_fairness/dump_priority_levels", headers=ADMIN)
    assert dump.status_code == 200, dump.text
    return {line.split(",")[0].strip() for line in dump.text.splitlines()[1:] if line.strip()}


def dispatched(url: str, user_fs: str) -> float:
    for line in httpx.get(url + "/metrics", headers=ADMIN).text.splitlines():
        if line.startswith("apiserver_flowcontrol_dispatched_requests_total{") and (
            f'flow_schema="{user_fs}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(params=["ensured"])
def serve(
    request: pytest.FixtureRequest, upstream: ServerThread, tmp_path: Path
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    config = tmp_path / "config"
    config.mkdir()
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\nbob-token,bob,2,"dev"\n'
                      'carol-token,carol,3,"dev"\n')  # fmt: skip
    (config / "gateway.yaml").write_text(
        "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"
        f"upstreams: [{{url: '{upstream.url}'}}]\nauthentication: {{tokenAuthFile: {tokens}}}\n"
        f"flowControlObjects: {request.param}\n"
    )
    (config / "mine.yaml").write_text(user_objects("alice-only", "alice"))
    url = f"http://127.0.0.1:{free_port()}"
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(config),
             "--listen", url.removeprefix("http://"), "--config-poll-interval", "0"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=log,
        )  # fmt: skip
        try:
            wait_until(lambda: _up(url), timeout=15)
            yield url, config, proc
        finally:
            proc.terminate()
            proc.wait(15)


def test_serve_applies_the_effective_configuration_the_cli_prints(
    serve: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    url, config, proc = serve
    effective = cli_effective(config)
    assert {"alice-only", "global-default", "workload-high", "leader-election", "exempt",
            "catch-all"} <= effective["PriorityLevelConfiguration"]  # fmt: skip
    assert served_levels(url) == effective["PriorityLevelConfiguration"]
    # An ordinary user falls to the suggested global-default schema, not to catch-all.
    assert httpx.get(url + "/echo", headers=BOB).status_code == 200
    wait_until(lambda: dispatched(url, "global-default") == 1.0)
    assert dispatched(url, "catch-all") == 0.0

    # A reload goes through the same ensurer.
    (config / "mine.yaml").write_text(user_objects("carol-only", "carol"))
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "carol-only" in served_levels(url))
    effective = cli_effective(config)
    assert "alice-only" not in effective["PriorityLevelConfiguration"]
    assert served_levels(url) == effective["PriorityLevelConfiguration"]
    assert httpx.get(url + "/echo", headers=BOB).status_code == 200
    wait_until(lambda: dispatched(url, "global-default") == 2.0)
    assert dispatched(url, "catch-all") == 0.0


@pytest.mark.parametrize("serve", ["exact"], indirect=True)
def test_exact_flow_control_objects_serve_what_the_cli_prints_for_them(
    serve: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    url, config, _proc = serve
    effective = cli_effective(config)
    assert effective["PriorityLevelConfiguration"] == {"alice-only", "exempt", "catch-all"}
    assert effective["FlowSchema"] == {"alice-only", "exempt", "catch-all"}
    assert served_levels(url) == effective["PriorityLevelConfiguration"]
    assert httpx.get(url + "/echo", headers=BOB).status_code == 200
    wait_until(lambda: dispatched(url, "catch-all") == 1.0)  # asked for: no global-default
