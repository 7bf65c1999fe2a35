"""``up``'s Prometheus file_sd targets: the children serving now, rewritten only on change."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.cli.scrape_targets import TargetsFile, targets


def test_targets_name_each_serving_child() -> None:
    got = targets(
        [("router-2", ""), ("router-1", "http://127.0.0.1:4001"), ("manager", "http://127.0.0.1:9")]
    )
    assert got == [
        {
            "targets": ["127.0.0.1:9"],
            "labels": {"component": "manager", "instance_name": "manager"},
        },
        {
            "targets": ["127.0.0.1:4001"],
            "labels": {"component": "router", "instance_name": "router-1"},
        },
    ]  # router-2 is restarting: not listed until it serves again


def test_the_file_follows_a_restart_on_a_new_port(tmp_path: Path) -> None:
    path = tmp_path / "prometheus-targets.json"
    file = TargetsFile(path)
    file.update([("router-1", "http://127.0.0.1:4001")])
    first = path.stat().st_mtime_ns, path.stat().st_ino
    file.update([("router-1", "http://127.0.0.1:4001")])
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == first  # unchanged: not rewritten
    file.update([("router-1", "http://127.0.0.1:4002")])
    assert json.loads(path.read_text())[0]["targets"] == ["127.0.0.1:4002"]
    assert not list(tmp_path.glob("*.tmp"))
