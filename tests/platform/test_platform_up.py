"""``apf-gateway up``: through the front door with the API key; stop leaves nothing behind."""

from __future__ import annotations

import asyncio
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from gateway.cli.up import DEFAULT_API_KEY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


TENANTS_CONFIG = """\
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: platform-tenants}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 50
    limitResponse: {type: Queue, queuing: {queues: 16, handSize: 2, queueLengthLimit: 20}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: platform-tenants}
spec:
  priorityLevelConfiguration: {name: platform-tenants}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
    - subjects: [{kind: Group, group: {name: system:authenticated}}]
      nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
      resourceRules:
        - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}
"""


def start_up(port: int, state: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "up",
            "--listen",
            f"127.0.0.1:{port}",
            "--state-dir",
            str(state),
            "--routers",
            "2",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


async def test_up_serves_through_the_front_door_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "tenants.yaml"
    config.write_text(TENANTS_CONFIG)
    proc = start_up(port, tmp_path, "--config", str(config))
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("apf-gateway is up"), line
        base = f"http://127.0.0.1:{port}/api/v1/namespaces/_"
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        async with httpx.AsyncClient(auth=(uuid, key), timeout=30) as client:
            assert (await client.get(base + "/actions", auth=("x", "y"))).status_code == 401
            code = "def main(a):\n    print('logged')\n    return {'hi': a.get('name')}\n"
            put = await client.put(
                base + "/actions/hello", json={"exec": {"kind": "python:3", "code": code}}
            )
            assert put.status_code == 200, put.text
            resp = await client.post(base + "/actions/hello?blocking=true", json={"name": "up"})
            assert resp.status_code == 200, resp.text
            assert resp.json()["response"]["result"] == {"hi": "up"}
            assert resp.json()["subject"] == "guest"
            aid = resp.headers["x-openwhisk-activation-id"]
            nb = await client.post(base + "/actions/hello", json={"name": "later"})
            assert nb.status_code == 202
            for _ in range(100):
                got = await client.get(f"{base}/activations/{nb.json()['activationId']}")
                if got.status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert got.json()["response"]["result"] == {"hi": "later"}
            for _ in range(100):  # the record may still sit in the other router's writer
                logs = await client.get(f"{base}/activations/{aid}/logs")
                if logs.status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert any("logged" in line for line in logs.json()["logs"])
            got_action = await client.get(base + "/actions/hello")
            assert got_action.json()["exec"]["code"] == code
            assert [a["name"] for a in (await client.get(base + "/actions")).json()] == ["hello"]
            assert (await client.delete(base + "/actions/hello")).status_code == 200
            assert (await client.get(base + "/actions/hello")).status_code == 404
            # `up --config` reached the front door: the tenants' own level admitted them.
            metrics = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            assert (
                'apiserver_flowcontrol_dispatched_requests_total{flow_schema="platform-tenants",'
                'priority_level="platform-tenants"}' in metrics
            )
        family = descendants(proc.pid)
        assert len(family) >= 5  # manager, 2 routers, front door, at least one runtime
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
    assert "apf-gateway stopped" in out
    left = [pid for pid in family if alive(pid)]
    assert left == [], f"orphaned processes: {left}"
    assert not list((tmp_path / "state" / "containers").glob("*/container.json"))


async def test_up_killed_hard_still_leaves_nothing(tmp_path: Path) -> None:
    """SIGKILL gives `up` no chance to clean up: its children get SIGTERM from the kernel
    (PR_SET_PDEATHSIG) and the manager removes the runtimes."""
    port = free_port()
    config = tmp_path / "tenants.yaml"
    config.write_text(TENANTS_CONFIG)
    proc = start_up(port, tmp_path, "--config", str(config))
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.readline().startswith(b"apf-gateway is up")
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        base = f"http://127.0.0.1:{port}/api/v1/namespaces/_"
        async with httpx.AsyncClient(auth=(uuid, key), timeout=30) as client:
            code = "def main(a):\n    return {}\n"
            await client.put(base + "/actions/a", json={"exec": {"kind": "python:3", "code": code}})
            assert (await client.post(base + "/actions/a?blocking=true")).status_code == 200
        family = descendants(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    for _ in range(300):
        left = [pid for pid in family if alive(pid)]
        if not left:
            break
        await asyncio.sleep(0.05)
    assert left == [], f"orphaned processes: {left}"
