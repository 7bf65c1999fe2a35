"""The example traffic files run, and say what docs/simulate.md says they show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.apfconfig import bootstrap
from gateway.simulate import load_traffic, simulate, to_json

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples" / "traffic"


def run(name: str) -> Any:
    return to_json(simulate(load_traffic(EXAMPLES / name), bootstrap.defaults()))


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == [
        "borrowing.yaml",
        "busy-cluster.yaml",
        "elephant-and-mouse.yaml",
        "many-tenants.yaml",
    ]


def test_busy_cluster_flood_is_held_back_and_admin_is_not() -> None:
    out = run("busy-cluster.yaml")["clients"]
    assert out["batch-flood"]["rejected"]["queue-full"] > 0
    assert out["admin"]["priorityLevel"] == "exempt"
    assert out["admin"]["waitP99"] == 0.0
    for name in ("kubelets", "node-leases", "controllers", "tenant-apps"):
        assert sum(out[name]["rejected"].values()) == 0
        assert out[name]["avgExecutingSeats"] == pytest.approx(out[name]["demandSeats"], rel=0.05)


def test_borrowing_walkthrough() -> None:
    levels = run("borrowing.yaml")["levels"]
    default = {e["time"]: e["currentCL"] for e in levels["global-default"]["limits"]}
    low = {e["time"]: e["currentCL"] for e in levels["workload-low"]["limits"]}
    assert default[30] > 300 and low[30] < 30  # the idle level lent its seats
    assert low[40] > 200 and default[40] < default[30]  # and took them back after one period
    assert levels["workload-low"]["rejected"]["queue-full"] > 0


def test_many_tenants_quiet_ones_keep_short_waits() -> None:
    out = run("many-tenants.yaml")["clients"]
    noisy, quiet = out["noisy"], out["quiet"]
    assert quiet["flows"] == 50
    assert sum(quiet["rejected"].values()) == 0
    assert quiet["waitP50"] < noisy["waitP50"] / 5
    assert noisy["rejected"]["queue-full"] > 0
