"""Smoke runs of two short scenarios end to end, so the locustfiles and the report cannot rot.

Each run is a real ``python -m loadtests`` subprocess: slow upstream, ``apf-gateway serve`` and
Locust (never imported here: it monkey-patches with gevent) on 127.0.0.1, bounded to a few
seconds. Both run at the same time to keep the test short.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests import scenario

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PNG = b"\x89PNG\r\n\x1a\n"

# find_spec, not importorskip: importing locust here would gevent-monkey-patch pytest itself.
pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in ("locust", "matplotlib")),
        reason="needs the loadtest extra (locust, matplotlib)",
    ),
    # One worker runs the module's load tests once for all its checks (pytest-xdist).
    pytest.mark.xdist_group("loadtest-smoke"),
]


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Path]]:
    # Not tmp_path_factory: concurrent pytest sessions of the same user prune each other's
    # numbered base folders, and a run's output must not vanish under it.
    with tempfile.TemporaryDirectory(prefix="apf-loadtest-smoke-") as tmp:
        base = Path(tmp)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        outs = {name: base / name for name in ("smoke-fairness", "smoke-mice")}
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "loadtests", str(HERE / f"{name}.yaml"), "--out", str(out)],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a hung run is stopped whole
            )
            for name, out in outs.items()
        }
        try:
            for name, p in procs.items():
                try:
                    output, _ = p.communicate(timeout=90)
                except subprocess.TimeoutExpired:
                    _stop(p)
                    output, _ = p.communicate()
                    pytest.fail(f"{name} did not finish in 90 s:\n{output.decode()[-3000:]}")
                assert p.returncode == 0, f"{name} failed:\n{output.decode()[-3000:]}"
            yield outs
        finally:
            for p in procs.values():
                _stop(p)


def _stop(p: subprocess.Popen[bytes]) -> None:
    """SIGINT lets the runner stop its children; then the run's process group is killed."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def _report(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "report.json").read_text())


def test_outputs_exist(runs: dict[str, Path]) -> None:
    for out in runs.values():
        for name in ("locust_stats.csv", "locust.html", "report.md", "metrics-after.txt"):
            assert (out / name).stat().st_size > 0, name
        for plot in ("throughput", "waits", "seats"):
            data = (out / "plots" / f"{plot}.png").read_bytes()
            assert data.startswith(PNG) and len(data) < 200_000


def test_every_tenant_has_goodput(runs: dict[str, Path]) -> None:
    report = _report(runs["smoke-fairness"])
    steady = report["phases"][-1]["tenants"]
    assert set(steady) == {"tenant-1", "tenant-2", "writer", "lister", "admin"}
    for name, stats in steady.items():
        assert stats["goodput"] > 0, name
        assert stats["failed"] == 0, (name, stats["failures"])
    # The two equal elephants share the level: neither gets less than half the other's goodput.
    a, b = steady["tenant-1"]["goodput"], steady["tenant-2"]["goodput"]
    assert min(a, b) / max(a, b) > 0.5
    assert 0.5 < report["phases"][-1]["jain"] <= 1.0
    assert report["server"]["levels"]["workload"]["dispatched"] > 0
    # Locust's CSV has a row per tenant (name="<tenant> <op>").
    rows = (runs["smoke-fairness"] / "locust_stats.csv").read_text()
    for row in ("tenant-1 get", "writer update", "lister list", "admin get"):
        assert row in rows


def test_mice_survive_elephants_and_timeouts_are_expected(runs: dict[str, Path]) -> None:
    report = _report(runs["smoke-mice"])
    unloaded, loaded = report["phases"]
    assert unloaded["tenants"]["elephant-1"]["requests"] == 0  # elephants arrive at 1.5 s
    assert loaded["tenants"]["elephant-1"]["ok"] > 0
    for mouse in ("mouse-1", "mouse-2"):
        assert loaded["tenants"][mouse]["goodput"] > 0
    reasons = {r["reason"] for r in report["server"]["rejected"]}
    assert "time-out" in reasons
    # 429s are expected outcomes with a Retry-After, not failures.
    assert report["totals"]["rejected"] > 0 and report["totals"]["failed"] == 0
    rejected = [
        s for s in loaded["tenants"].values() if s["rejected"] and s["retryAfter"] is not None
    ]
    assert rejected and all(s["retryAfter"]["min"] >= 1 for s in rejected)
    assert {t["name"]: t["met"] for t in report["targets"]} == {
        "no mouse rejected (loaded)": True,
        "rejections with reason time-out in [1, inf]": True,
    }


@pytest.mark.parametrize(
    ("locustfile", "expected"),
    [
        ("tenants.py", {"T_big", "T_mouse_1", "T_mouse_2", "T_admin", "T_writer", "T_lister"}),
        ("openwhisk.py", {"T_big", "T_mouse_1", "T_mouse_2", "T_admin", "T_writer", "T_lister",
                          "T_fn"}),
    ],
)  # fmt: skip
def test_locustfiles_define_a_class_per_tenant(
    tmp_path: Path, locustfile: str, expected: set[str]
) -> None:
    """Every tenant kind (the OpenWhisk one too, which the smoke runs do not reach) becomes a
    User class; ``locust --list`` imports the locustfile in its own process."""

    tenants = scenario.expand_tenants(
        [
            {"name": "big", "kind": "elephant", "users": 3},
            {"name": "mouse", "count": 2, "kind": "mouse", "rate": 2},
            {"name": "admin", "kind": "privileged"},
            {"name": "writer", "kind": "writer"},
            {"name": "lister", "kind": "wide"},
            {"name": "fn", "kind": "openwhisk", "apiKey": "u:k"},
        ]
    )
    (tmp_path / "tokens.csv").write_text(scenario.token_csv(tenants))
    spec = {
        "tenants": tenants, "tokenFile": str(tmp_path / "tokens.csv"),
        "eventDir": str(tmp_path / "events"), "duration": 5, "serviceTime": 0.1,
        "shape": {"type": "elephants-arrive", "at": 1},
    }  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(REPO), APF_LT_RUN=str(tmp_path / "run.json"))
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(REPO / "loadtests/locustfiles" / locustfile),
         "--list"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    listed = {line.strip() for line in out.splitlines() if line.startswith("    ")}
    assert listed == expected
