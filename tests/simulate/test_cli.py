"""``apf-gateway simulate`` as users run it: a real subprocess, its exit status and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.simulate.helpers import STRICT, TENANTS, write_traffic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples" / "traffic"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "simulate", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )


def test_example_as_json_is_deterministic_and_complete() -> None:
    example = EXAMPLES / "elephant-and-mouse.yaml"
    first, second = cli(example, "--json"), cli(example, "--json")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert set(data["clients"]) == {"elephant", "mouse"}
    for c in data["clients"].values():
        for key in (
            "flowSchema",
            "priorityLevel",
            "dispatched",
            "rejected",
            "waitP50",
            "waitP99",
            "avgExecutingSeats",
            "fairShare",
        ):
            assert key in c
        assert set(c["rejected"]) == {"queue-full", "concurrency-limit", "time-out"}
    assert data["clients"]["elephant"]["dispatched"] == 8 * 20
    level = data["levels"]["global-default"]
    assert level["nominalCL"] == 49
    assert level["dispatched"] == sum(c["dispatched"] for c in data["clients"].values())
    assert len(level["limits"]) == 6


def test_table_with_configs_and_traffic_after_config_paths(tmp_path: Path) -> None:
    traffic = write_traffic(
        tmp_path,
        {
            "duration": "20s",
            "serverConcurrencyLimit": 100,
            "clients": [
                {
                    "name": "scrape",
                    "user": "scraper",
                    "verb": "list",
                    "path": "/api/v1/pods",
                    "threads": 100,
                    "serviceTime": "1s",
                },
                {
                    "name": "tenant",
                    "user": "alice",
                    "verb": "get",
                    "path": "/api/v1/namespaces/a/pods/p",
                    "rate": "10/s",
                    "serviceTime": "100ms",
                },
            ],
        },
    )
    # No separate TRAFFIC argument: the last --config path is the traffic file.
    proc = cli("--exact-config", "--config", TENANTS, STRICT, traffic)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{traffic}: 20s of virtual time, seed 1")
    assert any(line.startswith("scrape") and "strict -> strict" in line for line in lines)
    assert any(line.startswith("tenant") and "tenants -> tenants" in line for line in lines)
    assert any(line.startswith("strict") and "Limited/Reject" in line for line in lines)
    # --exact-config: no suggested levels were added.
    assert not any(line.startswith("global-default") for line in lines)
    with_suggested = cli(traffic, "--json", "--config", TENANTS, STRICT)
    assert "global-default" in json.loads(with_suggested.stdout)["levels"]


def test_seed_flag_overrides_the_file(tmp_path: Path) -> None:
    data: dict[str, Any] = {
        "duration": "20s",
        "seed": 7,
        "clients": [
            {
                "name": "p",
                "user": "u",
                "verb": "get",
                "path": "/api/v1/pods",
                "rate": "20/s",
                "serviceTime": "10ms",
            }
        ],
    }
    traffic = write_traffic(tmp_path, data)
    from_file = json.loads(cli(traffic, "--json").stdout)
    overridden = json.loads(cli(traffic, "--json", "--seed", "8").stdout)
    assert (from_file["seed"], overridden["seed"]) == (7, 8)
    assert from_file["clients"]["p"]["calls"] != overridden["clients"]["p"]["calls"]


def test_bad_traffic_lists_every_error_without_traceback(tmp_path: Path) -> None:
    traffic = write_traffic(
        tmp_path,
        {
            "duration": "1 minute",
            "clients": [
                {
                    "name": "m",
                    "user": "u",
                    "verb": "get",
                    "path": "/x",
                    "rate": "2 per s",
                    "serviceTime": "1s",
                }
            ],
        },
    )
    proc = cli(traffic, "--json")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"{traffic}: duration: expected a duration like 60s" in proc.stderr
    assert f'{traffic}: clients[0].rate (client "m"): expected a rate' in proc.stderr
    assert "invalid traffic file: 2 error(s)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_config_missing_file_and_usage(tmp_path: Path) -> None:
    bad_config = tmp_path / "pl.yaml"
    bad_config.write_text(
        TENANTS.read_text(encoding="utf-8").replace("handSize: 6", "handSize: 70"),
        encoding="utf-8",
    )
    traffic = EXAMPLES / "elephant-and-mouse.yaml"
    proc = cli(traffic, "--config", bad_config)
    assert proc.returncode == 1
    assert "spec.limited.limitResponse.queuing.handSize" in proc.stderr
    assert "invalid configuration" in proc.stderr
    missing = cli(tmp_path / "nope.yaml")
    assert missing.returncode == 1
    assert "nope.yaml: cannot read" in missing.stderr
    usage = cli()
    assert usage.returncode == 2
    for proc in (missing, usage):
        assert "Traceback" not in proc.stderr
