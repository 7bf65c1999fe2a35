"""Issue 21 item 4: a local container's limits bound the container (a cgroup of its own),
not each of its processes (real runtime processes, real cgroups)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from platform_support import post

from gateway.manager.backends.base import ContainerSpec
from gateway.manager.backends.cgroups import Cgroups, limit_files, parse_mounts
from gateway.manager.backends.local import LocalProcessBackend
from tests.support.wait import wait_until

MEMORY_HOG = """
import os, time
def main(args):
    kids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(args["mb"] * 1024 * 1024)
            for i in range(0, len(block), 4096):
                block[i] = 1  # touched: resident, not just reserved
            time.sleep(0.5)  # all four hold their memory at once
            os._exit(0)
        kids.append(pid)
    signals = []
    for pid in kids:
        _, status = os.waitpid(pid, 0)
        signals.append(os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0)
    return {"signals": signals}
"""

FORK_BOMB = """
import os, time
def main(args):
    forked = 0
    for _ in range(args["tries"]):
        try:
            pid = os.fork()
        except OSError:  # EAGAIN: the cap
            break
        if pid == 0:
            time.sleep(60)  # stays, counting against the caps, until the container goes
            os._exit(0)
        forked += 1
    return {"forked": forked}
"""


def cgroups_or_skip(backend: LocalProcessBackend) -> Cgroups:
    if backend.cgroups is None:
        pytest.skip(f"cgroups are not writable here: {backend.sandbox.notes}")
    return backend.cgroups


async def run(backend: LocalProcessBackend, cid: str, code: str, value: dict[str, int]) -> dict:
    handle = await backend.create(ContainerSpec(cid, "python:3", memory_mb=128, secret="s" * 43))
    assert post(handle.url + "/init", {"value": {"code": code}}, handle.secret)[0] == 200
    status, body = await asyncio.to_thread(
        post, handle.url + "/run", {"value": value}, handle.secret
    )
    return {"status": status, "body": body, "handle": handle}


async def test_children_together_cannot_exceed_limits_memory(tmp_path: Path) -> None:
    """Four children of 64 MiB each under ``limits.memory: 128``: per process (RLIMIT_AS)
    every one fits; the container's cgroup stops them together."""
    backend = LocalProcessBackend(tmp_path / "state")
    cgroups = cgroups_or_skip(backend)
    try:
        ran = await run(backend, "c-hog", MEMORY_HOG, {"mb": 64})
        if cgroups.version == 1:
            peak = cgroups.file("c-hog", "memory", "memory.max_usage_in_bytes")
        else:
            peak = cgroups.file("c-hog", "memory", "memory.peak")
        used = int(peak.read_text()) if peak.exists() else 0
        await backend.remove(ran["handle"], grace=1.0)
    finally:
        await backend.close()
    assert used <= 128 * 1024 * 1024
    if ran["status"] == 200:  # v1: the kernel kills the largest processes of the container
        assert ran["body"]["signals"].count(9) >= 1, ran
    else:  # v2 (memory.oom.group): the whole container, its runtime included
        assert ran["status"] >= 500, ran
    assert cgroups.children() == set()  # removed with the container


async def test_a_fork_bomb_stops_at_the_container_and_manager_caps(tmp_path: Path) -> None:
    """``max_processes`` is each container's pids.max, ``max_processes_total`` all of them
    together (``user=current``: no per-uid RLIMIT_NPROC to hide behind)."""
    backend = LocalProcessBackend(
        tmp_path / "state", user="current", max_processes="32", max_processes_total="48"
    )
    cgroups_or_skip(backend)
    try:
        first = await run(backend, "c-bomb-1", FORK_BOMB, {"tries": 200})
        second = await run(backend, "c-bomb-2", FORK_BOMB, {"tries": 200})
        for ran in (first, second):
            await backend.remove(ran["handle"], grace=0.5)
    finally:
        await backend.close()
    counts = [first["body"]["forked"], second["body"]["forked"]]
    assert first["status"] == second["status"] == 200, (first, second)
    assert 0 < counts[0] < 32 and counts[1] < 32, counts
    assert sum(counts) < 48, counts


async def test_a_restarted_manager_kills_and_removes_stale_cgroups(tmp_path: Path) -> None:
    """A container cgroup without a container record (the manager died between the two, or a
    process escaped its group): the next manager's recovery kills what is in it."""
    crashed = LocalProcessBackend(tmp_path / "state")  # never closed: it died
    cgroups = cgroups_or_skip(crashed)
    escaped = subprocess.Popen(  # noqa: ASYNC220 - a process outside any container
        [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    try:
        for procs in cgroups.create("c-stale", {}):
            Path(procs).write_text(str(escaped.pid))  # noqa: ASYNC240 - a cgroup file
        restarted = LocalProcessBackend(tmp_path / "state")
        assert await restarted.list() == []
        wait_until(lambda: escaped.poll() is not None, what="the escaped process killed")
        assert restarted.cgroups is not None and restarted.cgroups.children() == set()
        await restarted.close()
        assert not any(base.exists() for base in cgroups.bases.values())
    finally:
        escaped.kill()
        escaped.wait()


def test_without_writable_cgroups_the_manager_says_the_limits_are_per_process(
    tmp_path: Path,
) -> None:
    """A cgroup parent that cannot be made (below a file of the hierarchy) stands for any
    host where cgroups cannot be used: a warning, and ``cgroups=on`` refuses to start."""
    bad = "cgroup.procs/apf-gateway"
    backend = LocalProcessBackend(tmp_path / "state", cgroup_parent=bad)
    assert backend.cgroups is None
    (note,) = [n for n in backend.sandbox.notes if n.startswith("no cgroups")]
    assert "bound each process, not the container" in note
    with pytest.raises(ValueError, match="cgroups=on: "):
        LocalProcessBackend(tmp_path / "state", cgroup_parent=bad, cgroups="on")


def test_limit_values_per_cgroup_version() -> None:
    v2 = limit_files(2, memory_mb=128, max_processes=64, cpus=0.5)
    assert v2 == {
        "": {
            "memory.max": str(128 * 1024 * 1024),
            "memory.swap.max": "0",
            "memory.oom.group": "1",
            "pids.max": "64",
            "cpu.max": "50000 100000",
        }
    }
    v1 = limit_files(1, memory_mb=256, max_processes=512, cpus=0)
    assert list(v1["memory"]) == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    assert v1["pids"] == {"pids.max": "512"} and "cpu" not in v1


def test_cgroup_mounts_are_read_from_mountinfo() -> None:
    text = (
        "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n"
        "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "33 25 0:29 / /proc rw - proc proc rw\n"
    )
    v2, v1 = parse_mounts(text)
    assert v2 == "/sys/fs/cgroup/unified"
    assert v1 == {"cpu": "/sys/fs/cgroup/cpu,cpuacct", "memory": "/sys/fs/cgroup/memory"}
    assert os.sep == "/"
