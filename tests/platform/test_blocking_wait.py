"""Blocking invokes that outlast the blocking wait, through the real front door (`up`): the
caller gets OpenWhisk's 202 with the activation id, never the proxy's 504, and the activation
completes and is recorded later."""

from __future__ import annotations

import contextlib
import select
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_platform_up import descendants, free_port, start_up

from gateway.cli.up import DEFAULT_API_KEY
from tests.support.wait import async_wait_for

SLEEPER = """import time
def main(a):
    time.sleep(a["sleep"])
    return {"slept": a["sleep"]}
"""


def start_one_router(port: int, state: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``up`` with one router and no stem cell."""
    return start_up(port, state, "--prewarm", "", *extra, routers=1)


def stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
    return out


async def invoke_past_the_wait(port: int, sleep: float, timeout_ms: int) -> dict[str, Any]:
    """PUT a sleeper, invoke it blocking, expect 202, then poll until its record exists."""
    base = f"http://127.0.0.1:{port}/api/v1/namespaces/_"
    uuid, _, key = DEFAULT_API_KEY.partition(":")
    async with httpx.AsyncClient(auth=(uuid, key), timeout=sleep + 120) as client:
        body = {"exec": {"kind": "python:3", "code": SLEEPER}, "limits": {"timeout": timeout_ms}}
        put = await client.put(base + "/actions/sleeper", json=body)
        assert put.status_code == 200, put.text
        resp = await client.post(
            base + "/actions/sleeper?blocking=true&result=true", json={"sleep": sleep}
        )
        assert resp.status_code == 202, resp.text
        aid = resp.json()["activationId"]
        assert list(resp.json()) == ["activationId"] and len(aid) == 32
        assert resp.headers["x-openwhisk-activation-id"] == aid

        async def record() -> dict[str, Any] | None:
            got = await client.get(f"{base}/activations/{aid}")
            if got.status_code == 200:
                return dict(got.json())
            assert got.status_code == 404, got.text  # not yet recorded
            return None

        return await async_wait_for(record, sleep + 30, f"activation {aid} recorded", 0.1)


async def test_blocking_invoke_past_the_wait_gets_202_then_completes(tmp_path: Path) -> None:
    port = free_port()
    proc = start_one_router(port, tmp_path, "--max-blocking-wait", "1")
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("apf-gateway is up"), line
        record = await invoke_past_the_wait(port, 3.0, 10000)
    finally:
        stop(proc)
    assert record["response"]["success"] is True
    assert record["response"]["result"] == {"slept": 3.0}
    assert record["duration"] >= 3000


def test_up_refuses_a_read_timeout_that_would_cut_blocking_invokes(tmp_path: Path) -> None:
    proc = start_one_router(
        free_port(), tmp_path, "--max-blocking-wait", "5", "--upstream-read-timeout", "5"
    )
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 2, out
    assert "--upstream-read-timeout (5s) must be longer than --max-blocking-wait (5s)" in out


def _argvs(pid: int) -> list[list[str]]:
    """The argv of each process below ``pid``."""
    found = []
    for child in descendants(pid):
        with contextlib.suppress(OSError):  # gone meanwhile
            found.append(Path(f"/proc/{child}/cmdline").read_bytes().decode().split("\0")[:-1])
    return found


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads argv from /proc")
def test_default_settings_give_the_front_door_more_time_than_the_blocking_wait(
    tmp_path: Path,
) -> None:
    """The defaults themselves, as ``up`` starts its processes: routers answer 202 after
    OpenWhisk's 60 s and the front door waits 70 s for them (the mechanism end to end, with a
    short wait, is the test above; the defaults once took 60 s to run through)."""
    proc = start_one_router(free_port(), tmp_path)
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.readline().startswith(b"apf-gateway is up")
        children = _argvs(proc.pid)
    finally:
        stop(proc)
    command = {argv[3]: argv for argv in children if argv[1:3] == ["-m", "gateway"]}
    routers = [argv for argv in children if argv[3:4] == ["router"]]
    front = command["serve"]
    assert routers and all(float(_flag(a, "--max-blocking-wait")) == 60.0 for a in routers)
    assert float(_flag(front, "--upstream-read-timeout")) == 70.0
