"""Issue 15: actions are isolated from the platform and from each other (real processes).

- A stem cell cannot be hijacked: its port is in the state dir, but ``/init`` and ``/run``
  need the container's secret, and a router never uses a container initialised with code
  other than the action's (the runtime reports the digest of what it holds).
- An action runs as its own uid (as root), in an empty private directory, with a scrubbed
  environment, limits, no new privileges, and (where ``unshare`` is permitted) its own PID,
  mount and network namespaces: it can read neither the platform's files (keys, store,
  records, other containers' logs) nor other processes' command lines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from platform_support import Platform, invoke, post, put_action

from gateway.manager.backends.base import ContainerHandle, ContainerSpec
from gateway.manager.backends.local import LocalProcessBackend
from gateway.manager.backends.sandboxing import SandboxOptions
from gateway.platform.actions import ActionInfo, validate_put
from gateway.router.activation import Status
from gateway.router.execution import FOREIGN_CODE, REFUSED, Executor
from gateway.router.pool import PoolSettings, RouterPool, WarmContainer
from gateway.testing import FakeEventClock
from tests.support.wait import wait_until

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="the uid switch needs root (the local backend runs as is)"
)
MARKER = "apf-isolation-marker-7d1c"

ATTACKER = "def main(args):\n    return {'stolen': args}\n"
VICTIM = "def main(args):\n    return {'victim': args.get('card')}\n"


# ---- item 1: stem-cell hijack ------------------------------------------------------------
async def test_a_stem_cell_cannot_be_initialised_by_a_stranger(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager("--prewarm", "python:3=1")
    router = platform.start_router("r1")
    records = platform.state / "containers"
    wait_until(lambda: list(records.glob("*/container.json")), what="a stem cell")
    (record,) = [json.loads(p.read_text()) for p in records.glob("*/container.json")]
    stem = f"http://127.0.0.1:{record['port']}"

    # whoever learns the port (the record, a port scan) gets 401, on /init as on /run
    status, body = await asyncio.to_thread(post, stem + "/init", {"value": {"code": ATTACKER}})
    assert status == 401 and "secret" in body["error"]
    status, _ = await asyncio.to_thread(post, stem + "/run", {"value": {}}, "guessed")
    assert status == 401

    # the victim's first invoke takes the stem cell and runs the victim's code
    await put_action(client, router, "pay", VICTIM)
    resp = await invoke(client, router, "pay", {"card": "4111"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["response"]["result"] == {"victim": "4111"}


@pytest.fixture
async def runtime(tmp_path: Path) -> Any:
    """A real runtime container (local backend) with a known secret."""
    backend = LocalProcessBackend(tmp_path / "state")
    handle = await backend.create(ContainerSpec("c-foreign", "python:3", secret="s" * 43))
    yield handle
    await backend.remove(handle, grace=1.0)
    await backend.close()


class Events:
    def pause(self, c: WarmContainer) -> None: ...
    def give_back(self, c: WarmContainer, reason: str) -> None: ...
    def drained(self, c: WarmContainer) -> None: ...


async def run_cold(
    handle: ContainerHandle, action: ActionInfo, lost: list[tuple[str, str]]
) -> tuple[Status, dict[str, Any]]:
    """One activation by a router that has not initialised the container (yet, or forgot)."""
    pool = RouterPool(FakeEventClock(), PoolSettings(), Events())
    pool.add(WarmContainer(handle.id, action.key, handle.url, 1, secret=handle.secret))
    slot = pool.reserve(action.key)
    assert slot is not None and slot.needs_init
    async with aiohttp.ClientSession() as http:
        executor = Executor(http, pool, {}, lambda c, why: lost.append((c.id, why)))
        outcome = await executor.execute(slot, action, {"card": "4111"}, "a" * 32, 0.0)
    return outcome.status, outcome.result


def victim() -> ActionInfo:
    doc = validate_put("guest", "pay", {"exec": {"kind": "python:3", "code": VICTIM}})
    return ActionInfo.from_doc(doc)


@pytest.mark.parametrize("case", ["foreign-code", "wrong-secret"])
async def test_a_router_never_runs_in_a_container_it_cannot_vouch_for(
    runtime: ContainerHandle, case: str
) -> None:
    """Even someone holding the secret cannot slip other code in (the digest differs); a
    container refusing the router's secret is the platform's error, not the action's."""
    if case == "foreign-code":
        assert post(runtime.url + "/init", {"value": {"code": ATTACKER}}, runtime.secret)[0] == 200
        handle, message = runtime, FOREIGN_CODE
    else:
        handle, message = dataclasses.replace(runtime, secret="w" * 43), REFUSED
    lost: list[tuple[str, str]] = []
    assert await run_cold(handle, victim(), lost) == (Status.WHISK_ERROR, {"error": message})
    assert lost == [(runtime.id, "init-failed")]


async def test_a_restarted_router_reuses_the_container_it_initialised(
    runtime: ContainerHandle,
) -> None:
    """The same code again (a router restarted and re-adopted it): the digest matches."""
    lost: list[tuple[str, str]] = []
    ok = (Status.SUCCESS, {"victim": "4111"})
    assert await run_cold(runtime, victim(), lost) == ok
    assert await run_cold(runtime, victim(), lost) == ok  # "already initialized", same digest
    assert lost == []


# ---- item 2: what an action can see --------------------------------------------------------
PROBE = """
import os, resource, socket

def main(args):
    out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd()}
    out["env"] = dict(os.environ)
    out["listing"] = sorted(os.listdir("."))
    out["read"] = {}
    for path in args["paths"]:
        try:
            with open(path, "rb") as f:
                out["read"][path] = f.read(200).decode(errors="replace")
        except OSError as exc:
            out["read"][path] = None
    cmdlines = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdlines.append(f.read().decode(errors="replace"))
            except OSError:
                pass
    out["cmdlines"] = cmdlines
    out["limits"] = {
        name: resource.getrlimit(getattr(resource, "RLIMIT_" + name))[0]
        for name in ("NOFILE", "NPROC", "CPU", "AS")
    }
    with open("/proc/self/status") as f:
        out["no_new_privs"] = [l.split()[1] for l in f if l.startswith("NoNewPrivs")]
    try:
        socket.create_connection(("127.0.0.1", args["port"]), timeout=1).close()
        out["reach"] = True
    except OSError:
        out["reach"] = False
    if args.get("shm"):  # only where /dev/shm is its own
        out["shm"] = sorted(os.listdir("/dev/shm"))
        with open("/dev/shm/" + args["shm"], "w") as f:
            f.write("x")
    with socket.create_server(("127.0.0.1", 0)) as own:  # its own loopback works
        socket.create_connection(own.getsockname(), timeout=1).close()
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1).close()
        out["outside"] = True
    except OSError:
        out["outside"] = False
    return out
"""


@ROOT_ONLY
@pytest.mark.parametrize(
    ("options", "namespaced"),
    [({}, True), ({"namespaces": "off", "network": "host"}, False)],
    ids=["namespaces", "permissions-only"],
)
async def test_an_action_cannot_read_the_platform_or_other_containers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, str],
    namespaced: bool,
) -> None:
    monkeypatch.setenv("APF_LEAK_CHECK", MARKER)  # the manager's environment
    keys = tmp_path / "openwhisk-keys"  # as ``up`` lays out its state
    keys.write_text(f"uuid:{MARKER},guest,guest\n")
    keys.chmod(0o600)
    store = tmp_path / "platform.db"
    store.write_text(MARKER)
    store.chmod(0o600)
    bystander = subprocess.Popen(  # noqa: ASYNC220 - a platform process, secret in its argv
        [sys.executable, "-c", "import time; time.sleep(60)", f"--api-key={MARKER}"]
    )
    backend = LocalProcessBackend(tmp_path / "state", **options)
    if backend.sandbox.namespaces is not namespaced:
        pytest.skip(f"unshare is not permitted here: {backend.sandbox.notes}")
    other = await backend.create(ContainerSpec("c-other", "python:3", secret="o" * 43))
    mine = await backend.create(ContainerSpec("c-mine", "python:3", secret="m" * 43))
    try:
        # the other container logs a secret of its own
        code = f"def main(a):\n    print('{MARKER}')\n    return {{}}\n"
        assert post(other.url + "/init", {"value": {"code": code}}, other.secret)[0] == 200
        assert post(other.url + "/run", {"value": {}}, other.secret)[0] == 200
        folder = tmp_path / "state" / "containers" / "c-other"
        assert MARKER in (folder / "stdout.log").read_text()
        paths = [
            str(keys),
            str(store),
            str(folder / "stdout.log"),
            str(folder / "container.json"),
            "/proc/1/environ",
            f"/proc/{bystander.pid}/cmdline",
            f"/proc/{os.getpid()}/environ",
        ]
        assert post(mine.url + "/init", {"value": {"code": PROBE}}, mine.secret)[0] == 200
        port = int(other.url.rsplit(":", 1)[1])
        value = {"paths": paths, "port": port, "shm": MARKER if namespaced else ""}
        status, seen = post(mine.url + "/run", {"value": value}, mine.secret)
        assert status == 200, seen
    finally:
        bystander.kill()
        bystander.wait()
        for handle in (mine, other):
            await backend.remove(handle, grace=1.0)
        await backend.close()

    assert all(seen["read"][p] is None for p in paths[:4]), seen["read"]
    assert MARKER not in (seen["read"][paths[4]] or "") + (seen["read"][paths[6]] or "")
    assert MARKER not in json.dumps(seen["env"]) and "APF_CONTAINER_SECRET" not in seen["env"]
    assert set(seen["env"]) <= {"PATH", "PYTHONUNBUFFERED", "LANG", "HOME", "TMPDIR"}
    assert seen["uid"] >= 100000 and seen["gid"] == seen["uid"] and seen["groups"] == []
    assert seen["listing"] == []  # an empty working directory of its own
    assert seen["no_new_privs"] == ["1"]
    assert seen["limits"]["NOFILE"] == 1024 and seen["limits"]["NPROC"] == 512
    assert seen["limits"]["CPU"] == 3600
    cmdline = seen["read"][paths[5]] or ""
    if namespaced:  # its own PID namespace: no other process exists for it
        assert MARKER not in cmdline and not any(MARKER in c for c in seen["cmdlines"])
        assert len(seen["cmdlines"]) == 1
        assert seen["reach"] is False  # no network: not the other container, not the manager
        assert seen["outside"] is False
        assert seen["shm"] == []  # a /dev/shm of its own: the host's is not touched
        assert not await asyncio.to_thread(os.path.exists, f"/dev/shm/{MARKER}")
    else:  # documented limits without namespaces: argv of other processes, the host network
        assert MARKER in cmdline
        assert seen["reach"] is True  # it reaches the port, but not without the secret


async def test_without_a_uid_switch_or_namespaces_the_launcher_still_confines_what_it_can(
    tmp_path: Path,
) -> None:
    """What a non-root platform gets (here: root told ``user=current``): limits, a scrubbed
    environment and its own work directory, no uid switch, and a warning saying so."""
    backend = LocalProcessBackend(
        tmp_path / "state", user="current", namespaces="off", network="host"
    )
    if os.geteuid() == 0:
        assert "user=current as root: actions run as root" in backend.sandbox.notes
    handle = await backend.create(ContainerSpec("c-plain", "python:3", secret="p" * 43))
    try:
        assert post(handle.url + "/init", {"value": {"code": PROBE}}, handle.secret)[0] == 200
        status, seen = post(handle.url + "/run", {"value": {"paths": [], "port": 1}}, handle.secret)
    finally:
        await backend.remove(handle, grace=1.0)
        await backend.close()
    assert status == 200 and seen["uid"] == os.geteuid()
    assert seen["listing"] == [] and seen["cwd"] != os.getcwd()
    assert set(seen["env"]) <= {"PATH", "PYTHONUNBUFFERED", "LANG", "HOME", "TMPDIR"}
    assert seen["no_new_privs"] == ["1"] and seen["limits"]["NOFILE"] == 1024


def test_sandbox_options_from_the_environment_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APF_LOCAL_NETWORK", "host")
    monkeypatch.setenv("APF_LOCAL_MAX_FILES", "64")
    options = SandboxOptions.from_os({"max_files": "128"})
    assert options.network == "host" and options.max_files == 128
    monkeypatch.setenv("APF_LOCAL_NETWORK", "wide")
    with pytest.raises(ValueError, match="APF_LOCAL_NETWORK: network=wide: expected one of"):
        SandboxOptions.from_os({})


def test_sandbox_options_are_validated_with_the_option_named() -> None:
    with pytest.raises(ValueError, match="--backend-option network=wide: expected one of"):
        SandboxOptions.parse({"network": "wide"})
    with pytest.raises(ValueError, match="--backend-option bogus: unknown"):
        SandboxOptions.parse({"bogus": "1"})
    with pytest.raises(ValueError, match="--backend-option uids=9: expected FIRST-LAST"):
        SandboxOptions.parse({"uids": "9"})
    with pytest.raises(ValueError, match="--backend-option max_files=4: expected an integer"):
        SandboxOptions.parse({"max_files": "4"})
    parsed = SandboxOptions.parse({"uids": "200000-200099", "network": "host"})
    assert parsed.uids == (200000, 200099) and parsed.network == "host"
