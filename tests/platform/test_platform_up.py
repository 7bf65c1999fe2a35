"""``apf-gateway up``: through the front door with the API key; stop leaves nothing behind."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from platform_support import alive, recorded

from gateway.cli.main import build_parser
from gateway.cli.up import DEFAULT_API_KEY
from gateway.store import open_store
from tests.support.certs import issue, make_ca
from tests.support.ports import free_port
from tests.support.wait import async_wait_for, async_wait_until, wait_for


async def all_exited(pids: set[int], within: float, what: str) -> None:
    """Until none of ``pids`` runs (zombies do not count)."""
    left: list[int] = []

    def gone() -> bool:
        left[:] = [pid for pid in pids if alive(pid)]
        return not left

    await async_wait_until(gone, within, lambda: f"{what} to exit; still running: {left}", 0.05)


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


def start_up(port: int, state: Path, *extra: str, routers: int = 2) -> subprocess.Popen[bytes]:
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
            str(routers),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def wait_up(proc: subprocess.Popen[bytes]) -> None:
    """Until ``up`` says it is up (its first line), at most 30 s."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline().decode() if ready else ""
    assert line.startswith("apf-gateway is up"), line


async def test_up_serves_through_the_front_door_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "tenants.yaml"
    config.write_text(TENANTS_CONFIG)
    proc = start_up(port, tmp_path, "--config", str(config))
    try:
        wait_up(proc)
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
            got = await recorded(client, f"{base}/activations/{nb.json()['activationId']}")
            assert got.json()["response"]["result"] == {"hi": "later"}
            # the record may still sit in the other router's writer
            logs = await recorded(client, f"{base}/activations/{aid}/logs")
            assert any("logged" in line for line in logs.json()["logs"])
            got_action = await client.get(base + "/actions/hello")
            assert got_action.json()["exec"]["code"] == code
            assert [a["name"] for a in (await client.get(base + "/actions")).json()] == ["hello"]
            # counted while the action exists: its delete gives its runtime back (gone soon)
            family = descendants(proc.pid)
            assert len(family) >= 5  # manager, 2 routers, front door, at least one runtime
            assert (await client.delete(base + "/actions/hello")).status_code == 200
            assert (await client.get(base + "/actions/hello")).status_code == 404
            # `up --config` reached the front door: the tenants' own level admitted them.
            metrics = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            assert (
                'apiserver_flowcontrol_dispatched_requests_total{flow_schema="platform-tenants",'
                'priority_level="platform-tenants"}' in metrics
            )
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
    await all_exited(family, 15, "the processes `up` started")


# ---- supervision: failures at start, a router crash, `up` killed -------------------------
UP = [sys.executable, "-m", "gateway", "up"]


class Up:
    """``apf-gateway up`` on a free port (``--listen 127.0.0.1:0``), its output collected."""

    def __init__(
        self,
        state: Path,
        *extra: str,
        routers: int = 2,
        stderr: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``stderr``: a file for up's standard error (else it joins ``lines``)."""
        argv = [*UP, "--listen", "127.0.0.1:0", "--state-dir", str(state)]
        with contextlib.ExitStack() as files:
            err = files.enter_context(stderr.open("wb")) if stderr else subprocess.STDOUT
            self.proc = subprocess.Popen(
                [*argv, "--routers", str(routers), *extra],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self.wait_for("apf-gateway is up: ").split(": ", 1)[1]
        self.base = self.url + "/api/v1/namespaces/_"
        # the internal token up wrote for this run: the routers' /_platform/ endpoints need it
        token = (state / "internal-token").read_text().strip()
        self.internal = {"Authorization": f"Bearer {token}"}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60) -> str:
        def output() -> str:
            return f"{text!r} in the output of up:\n" + "\n".join(self.lines)

        def found() -> str | None:
            line = next((line for line in self.lines if text in line), None)
            if line is None and self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"up exited without printing {output()}")
            return line

        return wait_for(found, timeout, output, interval=0.05)

    def router_urls(self) -> list[str]:
        return self.wait_for("  manager: ").split("routers: ", 1)[1].split()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=90)
        self._reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code


SLOW = """\
import time
def main(a):
    time.sleep(a.get('s', 0))
    return {'slept': a.get('s', 0)}
"""


def auth() -> tuple[str, str]:
    uuid, _, key = DEFAULT_API_KEY.partition(":")
    return uuid, key


def router_pid(router_id: str, family: set[int]) -> int:
    for pid in family:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"router" in argv and router_id.encode() in argv:
            return pid
    raise AssertionError(f"no process for {router_id}")


def in_flight_marks(db: Path) -> int:
    """Activations the routers marked in flight in up's store (read-only, beside them)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM in_flight").fetchone()[0])


async def busy_routers(
    client: httpx.AsyncClient, urls: list[str], want: int, internal: dict[str, str]
) -> list[str]:
    """Router ids running activations, once ``want`` activations run in all."""

    async def busy() -> list[str] | None:
        running: dict[str, int] = {}
        for url in urls:
            with contextlib.suppress(httpx.HTTPError):
                state = (await client.get(url + "/_platform/v1/state", headers=internal)).json()
                if n := sum(c["in_flight"] for c in state["containers"]):
                    running[state["router"]] = n
        return sorted(running) if sum(running.values()) >= want else None

    return await async_wait_for(busy, 20, f"{want} activations running on {urls}", 0.05)


async def two_running(
    client: httpx.AsyncClient, up: Up, seconds: float
) -> tuple[httpx.Response, asyncio.Future[httpx.Response], list[str]]:
    """A non-blocking (its 202) and a blocking invocation (its pending answer) of an action
    sleeping ``seconds``, once both run; and the ids of the routers running them."""
    put = await client.put(
        up.base + "/actions/slow", json={"exec": {"kind": "python:3", "code": SLOW}}
    )
    assert put.status_code == 200, put.text
    background = await client.post(up.base + "/actions/slow", json={"s": seconds})
    assert background.status_code == 202
    waiting = asyncio.ensure_future(
        client.post(up.base + "/actions/slow?blocking=true", json={"s": seconds})
    )
    async with httpx.AsyncClient(timeout=5) as peers:
        busy = await busy_routers(peers, up.router_urls(), 2, up.internal)
    return background, waiting, busy


async def test_a_router_killed_mid_activation_is_restarted_and_the_activation_recorded(
    tmp_path: Path,
) -> None:
    up = Up(tmp_path)
    try:
        async with httpx.AsyncClient(auth=auth(), timeout=60) as client:
            background, waiting, victims = await two_running(client, up, 60)
            # a blocking activation is marked in flight once it has run MARK_DELAY: wait
            # until both marks are in the store, so the restarted routers have them to record
            await async_wait_until(
                lambda: in_flight_marks(tmp_path / "platform.db") >= 2, 20, "both marks stored"
            )
            family = descendants(up.proc.pid)
            for victim in victims:
                os.kill(router_pid(victim, family), signal.SIGKILL)
            # the blocking caller learns at once that its activation failed
            failed = await asyncio.wait_for(waiting, 30)
            assert failed.status_code >= 500, failed.text
            # the activation answered with 202 gets its record from the restarted router
            aid = background.json()["activationId"]
            got = await recorded(client, f"{up.base}/activations/{aid}")
            assert got.status_code == 200, got.text
            record = got.json()
            assert record["response"]["status"] == "whisk internal error"
            assert record["response"]["statusCode"] == 3
            assert record["response"]["success"] is False
            assert "router" in record["response"]["result"]["error"]
            assert record["end"] >= record["start"]
            # so does the blocking one: both killed activations are listed, none lost
            listed = (await client.get(up.base + "/activations?name=slow&docs=true")).json()
            statuses = [r["response"]["status"] for r in listed]
            assert statuses == ["whisk internal error", "whisk internal error"], listed
            for victim in victims:
                up.wait_for(f"{victim} exited (killed by SIGKILL)")
                up.wait_for(f"{victim} is serving again")
            assert any("restart 1 in 0.5 s" in line for line in up.lines)
            # the platform works on: invocations succeed (on both routers, new containers)
            for _ in range(4):
                ok = await client.post(up.base + "/actions/slow?blocking=true", json={"s": 0})
                assert ok.status_code == 200, ok.text
                assert ok.json()["response"]["result"] == {"slept": 0}
    finally:
        code = up.stop()
    assert code == 0, "\n".join(up.lines)
    assert "apf-gateway stopped" in up.lines
    # the logs tell what happened
    logs = tmp_path / "logs"
    for victim in victims:
        text = (logs / f"{victim}.log").read_text()
        assert "left unfinished by a previous run of router" in text, text
        assert text.count("registered with the manager as") >= 2, text
    manager = (logs / "manager.log").read_text()
    assert f"router {victims[0]} is gone (lease expired or restarted)" in manager, manager
    assert "created container" in manager and "removed container" in manager, manager


async def test_up_killed_mid_activation_lets_children_finish_it_and_exit(tmp_path: Path) -> None:
    """SIGKILL of `up`: the children notice (PR_SET_PDEATHSIG) and stop in order by
    themselves: the routers finish the running activations and record them before the
    manager removes the containers (it waits for the routers to leave)."""
    up = Up(tmp_path, "--prewarm", "")
    async with httpx.AsyncClient(auth=auth(), timeout=60) as client:
        # longer than the manager's SIGTERM -> SIGKILL grace for containers (5 s)
        background, waiting, _ = await two_running(client, up, 7)
        family = descendants(up.proc.pid)
        assert len(family) >= 6  # manager, 2 routers, front door, 2 runtimes
        up.proc.kill()
        up.stop()
        finished = await asyncio.wait_for(waiting, 60)
    assert finished.status_code == 200, finished.text
    assert finished.json()["response"]["result"] == {"slept": 7}
    await all_exited(family, 30, "the children of `up` after it died")
    store = open_store(f"sqlite:///{tmp_path / 'platform.db'}")
    await store.open()
    try:
        records = await store.list_activations("guest", name="slow")
    finally:
        await store.close()
    assert [r["response"]["result"] for r in records] == [{"slept": 7}, {"slept": 7}]
    assert background.json()["activationId"] in {r["activationId"] for r in records}


def run_up(tmp_path: Path, *args: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [*UP, "--state-dir", str(tmp_path / "s"), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        code, out, err, took = run_up(tmp_path, "--listen", f"127.0.0.1:{port}")
    assert code == 2
    assert "apf-gateway is up" not in out
    assert err == f"apf-gateway up: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert took < 5


def test_a_front_door_that_cannot_start_is_explained_at_once(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: FlowSchema\n  spec: [\n")
    code, out, err, took = run_up(tmp_path, "--listen", "127.0.0.1:0", "--config", str(bad))
    assert code == 1, err
    assert "apf-gateway is up" not in out
    assert f"front-door exited at start (exit code 2): {bad}: document 1: invalid YAML" in err
    assert "Traceback" not in err
    assert took < 10  # not the 20-30 s start timeout
    assert out.strip().endswith("apf-gateway stopped")
    # the manager was stopped while it started its stem cell: that runtime went too
    assert writing_into(tmp_path) == []


def writing_into(folder: Path) -> list[int]:
    """Processes whose stdout is a file under ``folder`` (runtimes log to the state dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "fd" / "1").startswith(str(folder)) and alive(
                    int(entry.name)
                ):
                    found.append(int(entry.name))
    return found


def test_bad_arguments_get_one_line_errors(tmp_path: Path) -> None:
    cases = [
        (["--config", str(tmp_path / "missing.yaml")], "missing.yaml: no such file"),
        (["--listen", "127.0.0.1:http"], "cannot listen on 127.0.0.1:http: bad port"),
        (["--listen", "256.0.0.1:80"], "cannot listen on 256.0.0.1:80:"),
        (["--routers", "0"], "--routers must be >= 1"),
        (["--api-key", "nokey"], "--api-key must be UUID:KEY"),
    ]
    for args, message in cases:
        code, _, err, took = run_up(tmp_path, *args)
        assert code == 2, (args, err)
        assert err.startswith("apf-gateway up: ") and message in err, (args, err)
        assert len(err.splitlines()) == 1 and took < 5, (args, err)
    done = subprocess.run(
        [*UP, "--state-dir", "/proc/x"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("apf-gateway up: cannot use --state-dir /proc/x: ")
    assert "Traceback" not in done.stderr


def test_port_0_serves_on_the_printed_port(tmp_path: Path) -> None:
    up = Up(tmp_path, "--prewarm", "")
    try:
        port = int(up.url.rsplit(":", 1)[1])
        assert port != 0
        livez = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5)
        assert livez.status_code == 200
    finally:
        assert up.stop() == 0


def test_the_front_door_log_has_the_access_log(tmp_path: Path) -> None:
    up = Up(tmp_path, "--prewarm", "")
    try:
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        listed = httpx.get(
            up.base + "/actions", auth=(uuid, key), headers={"X-Request-Id": "up-req-1"}, timeout=30
        )
        assert listed.status_code == 200 and listed.headers["x-request-id"] == "up-req-1"
        refused = httpx.get(up.base + "/actions", auth=(uuid, "wrong"), timeout=30)
        assert refused.status_code == 401 and refused.headers["x-request-id"]
        log = tmp_path / "logs" / "front-door.log"

        def line(rid: str) -> dict[str, object] | None:
            for text in log.read_text().splitlines():
                if text.startswith("{") and f'"requestID":"{rid}"' in text:
                    return dict(json.loads(text))
            return None

        ok = wait_for(lambda: line("up-req-1"), 10, "the request's line in front-door.log")
        assert (ok["user"], ok["status"], ok["path"]) == (
            "guest",
            200,
            "/api/v1/namespaces/_/actions",
        )
        assert ok["apf"] == "executed" and ok["upstreamSeconds"] is not None
        denied = wait_for(lambda: line(refused.headers["x-request-id"]), 10, "the 401's line")
        assert denied["status"] == 401 and denied["user"] is None
        assert key not in log.read_text()  # the API key never reaches the log
    finally:
        assert up.stop() == 0


def test_commands_describe_every_flag_with_its_default() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = {
        "up": sub.choices["up"],
        "router": sub.choices["router"],
        "manager serve": next(
            a for a in sub.choices["manager"]._actions if isinstance(a, argparse._SubParsersAction)
        ).choices["serve"],
    }
    for name, command in commands.items():
        assert command.description, f"{name} has no description"
        for action in command._actions:
            if action.dest == "help":
                continue
            flag = "/".join(action.option_strings) or action.dest
            assert action.help, f"{name} {flag}: no help"
            if action.default not in (None, False, []):
                assert "default" in action.help, f"{name} {flag}: help names no default"


def test_router_and_manager_refuse_bad_settings_in_one_line() -> None:
    cases = [
        (["router", "--store", "bogus://x"], "apf-gateway router: unsupported store URL"),
        (["manager", "serve", "--store", "bogus://x"], "--store: unsupported store URL"),
    ]
    for args, message in cases:
        done = subprocess.run(
            [sys.executable, "-m", "gateway", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1, done.stderr


def test_up_says_at_start_when_limits_bound_each_process_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the manager cannot give containers cgroups (here: a cgroup parent that cannot
    be made, as on a host without writable cgroups), ``up`` says so with its start lines."""
    monkeypatch.setenv("APF_LOCAL_CGROUP_PARENT", "cgroup.procs/apf-gateway")
    up = Up(tmp_path, "--prewarm", "")
    try:
        warning = up.wait_for("  warning: no cgroups")
        assert "bound each process, not the container" in warning
        logs = up.wait_for("  logs: ")
        assert up.lines.index(warning) < up.lines.index(logs)
    finally:
        assert up.stop() == 0


def test_up_serves_the_platform_over_https(tmp_path: Path) -> None:
    """``up --tls-cert-file/--tls-private-key-file``: the OpenWhisk API over HTTPS; a pair
    that does not match fails at once, before anything starts."""
    ca = make_ca(tmp_path)
    server = issue(ca, tmp_path, "server", cn="up", ips=("127.0.0.1",), usage="server")
    bad = start_up(free_port(), tmp_path / "bad", "--tls-cert-file", str(server.cert_file),
                   "--tls-private-key-file", str(ca.key_file))  # fmt: skip
    out, _ = bad.communicate(timeout=60)
    assert bad.returncode == 2 and b"does not match" in out, out
    port = free_port()
    proc = start_up(port, tmp_path, "--tls-cert-file", str(server.cert_file),
                    "--tls-private-key-file", str(server.key_file), routers=1)  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith(f"apf-gateway is up: https://127.0.0.1:{port}"), line
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        ctx = ssl.create_default_context(cafile=ca.cert_file)
        url = f"https://127.0.0.1:{port}/api/v1/namespaces/_/actions"
        assert httpx.get(url, auth=(uuid, key), verify=ctx, timeout=30).status_code == 200
        assert httpx.get(url, auth=("x", "y"), verify=ctx, timeout=30).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
