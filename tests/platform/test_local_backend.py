"""The local-process backend against real runtime processes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from platform_support import post

from gateway.manager.backends import load_backend
from gateway.manager.backends.base import (
    BackendError,
    ContainerGone,
    ContainerHandle,
    ContainerSpec,
    Status,
)
from gateway.manager.backends.local import LocalProcessBackend
from tests.support.wait import async_wait_until


def test_unknown_backend_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        load_backend("nope")
    assert isinstance(load_backend("local", state_dir=tmp_path), LocalProcessBackend)


async def test_lifecycle_and_recovery_after_restart(tmp_path: Path) -> None:
    backend = LocalProcessBackend(tmp_path)
    spec = ContainerSpec("c-test1", "python:3", 128, 1, {"role": "action", "x": "1"})
    handle = await backend.create(spec)
    try:
        assert (await backend.status(handle)) is Status.RUNNING
        code = "def main(a):\n    return {'n': len(bytearray(a['mb'] * 1024 * 1024))}\n"
        assert post(handle.url + "/init", {"value": {"code": code}}, handle.secret)[0] == 200
        assert post(handle.url + "/run", {"value": {"mb": 1}}, handle.secret) == (
            200,
            {"n": 1048576},
        )
        # limits.memory caps the address space (2 x 128 MiB + 1 GiB): 2 GiB cannot be had
        status, body = post(handle.url + "/run", {"value": {"mb": 2048}}, handle.secret)
        assert status == 502 and "MemoryError" in str(body)

        await backend.pause(handle)
        assert (await backend.status(handle)) is Status.PAUSED
        await backend.resume(handle)
        assert (await backend.status(handle)) is Status.RUNNING

        # a new backend on the same state dir (manager restart) finds it, labels included
        (found,) = await LocalProcessBackend(tmp_path).list()
        assert found.id == "c-test1" and found.url == handle.url and found.labels["x"] == "1"
        assert backend.agent(handle)["pid"] == handle.data["pid"]
    finally:
        await backend.remove(handle, grace=1.0)
    assert (await backend.status(handle)) is Status.GONE
    assert await backend.list() == []
    await backend.remove(handle, grace=1.0)  # idempotent
    with pytest.raises(ContainerGone):
        await backend.pause(handle)
    await backend.close()


async def test_runtime_that_cannot_start_leaves_nothing(tmp_path: Path) -> None:
    backend = LocalProcessBackend(tmp_path, python="/bin/false", start_timeout=2)
    with pytest.raises(BackendError, match="exited"):
        await backend.create(ContainerSpec("c-bad", "python:3"))
    assert list((tmp_path / "containers").iterdir()) == []


async def test_a_runtime_exiting_or_silent_at_start_is_explained_by_its_last_line(
    tmp_path: Path,
) -> None:
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'starting' >&2\necho 'boom: no runtime here' >&2\nexit 3\n")
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\necho 'waiting for nothing' >&2\nexec sleep 60\n")
    for script in (failing, silent):
        script.chmod(0o755)
    backend = LocalProcessBackend(tmp_path / "a", python=str(failing))
    with pytest.raises(
        BackendError, match=r"^the runtime exited at start \(exit code 3\): boom: no runtime here$"
    ):
        await backend.create(ContainerSpec("c-fails", "python:3"))
    backend = LocalProcessBackend(tmp_path / "b", python=str(silent), start_timeout=0.3)
    with pytest.raises(
        BackendError, match=r"^the runtime did not start within 0.3 s: waiting for nothing$"
    ):
        await backend.create(ContainerSpec("c-silent", "python:3"))
    assert list((tmp_path / "b" / "containers").iterdir()) == []  # killed, nothing left


async def test_evict_is_a_graceful_stop_that_lets_the_run_in_flight_finish(
    tmp_path: Path,
) -> None:
    """Locally nothing refuses an eviction: SIGTERM, the runtime finishes its run, exits."""

    backend = LocalProcessBackend(tmp_path)
    handle = await backend.create(ContainerSpec("c-evict", "python:3", 128, 1))
    code = (
        "import time\n"
        "def main(a):\n"
        "    print('started', flush=True)\n"
        "    time.sleep(0.5)\n"  # the run in flight the eviction must let finish
        "    return {'ok': 1}\n"
    )
    assert post(handle.url + "/init", {"value": {"code": code}}, handle.secret)[0] == 200
    run = asyncio.ensure_future(
        asyncio.to_thread(post, handle.url + "/run", {"value": {}}, handle.secret)
    )
    stdout = Path(backend.agent(handle)["logs"]["stdout"])
    await async_wait_until(lambda: b"started" in stdout.read_bytes(), what="the run started")
    assert await backend.evict(handle, grace=5.0) is True
    assert (await backend.status(handle)) is Status.GONE
    assert await run == (200, {"ok": 1})
    await backend.close()


async def test_a_cancelled_create_leaves_no_process_behind(tmp_path: Path) -> None:
    """A manager stopping while a stem cell is being backfilled cancels the create: the
    runtime process it started must not outlive it unrecorded."""

    backend = LocalProcessBackend(tmp_path)
    create = asyncio.ensure_future(backend.create(ContainerSpec("c-cancel", "python:3")))
    # started, not yet listening (closely polled: the runtime starts in a few tens of ms)
    await async_wait_until(lambda: backend._children, what="the runtime started", interval=0.001)
    (pid,) = backend._children
    create.cancel()
    with pytest.raises(asyncio.CancelledError):
        await create
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert list((tmp_path / "containers").iterdir()) == []
    await backend.close()


async def test_after_a_restart_remove_stops_the_process_group_and_spares_a_reused_pid(
    tmp_path: Path,
) -> None:
    """A restarted manager has no ``Popen`` of its containers: ``remove`` signals the process
    group by pid, continues a paused one so that it handles SIGTERM within the grace, and
    never signals a pid whose start time is not the recorded one (the kernel reused it)."""
    backend = LocalProcessBackend(tmp_path)
    handle = await backend.create(ContainerSpec("c-orphan", "python:3", 128, 1))
    proc = backend._children[int(handle.data["pid"])]
    await backend.pause(handle)
    restarted = LocalProcessBackend(tmp_path)
    (found,) = await restarted.list()
    await restarted.remove(found, grace=30.0)
    assert await asyncio.to_thread(proc.wait, 10) == 0  # a graceful exit, not SIGKILL
    assert await restarted.list() == []
    await backend.close()

    idle = ["sleep", "60"]  # a process that is not ours, idling until it is killed
    with subprocess.Popen(idle, start_new_session=True) as other:  # noqa: ASYNC220 - no wait
        try:
            data = {"pid": other.pid, "start_time": "1"}  # not this process's start time
            reused = ContainerHandle("c-gone", "http://127.0.0.1:1", {}, 0.0, data)
            await restarted.remove(reused, grace=0.0)
            assert other.poll() is None
        finally:
            other.kill()


def copy_of_the_source_below_tmp() -> Path:
    tree = Path(tempfile.mkdtemp(prefix="apf-tree-", dir="/tmp"))
    source = Path(__file__).resolve().parents[2] / "gateway"
    shutil.copytree(source, tree / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    tree.chmod(0o755)
    return tree


async def test_a_source_tree_below_tmp_still_runs_sandboxed(tmp_path: Path) -> None:
    """A checkout below /tmp (as CI clones may be): the sandbox covers /tmp with the container's
    own directory, so the runtime's modules must all be loaded before that mount."""
    backend = LocalProcessBackend(tmp_path / "state")
    if not backend.sandbox.namespaces:
        pytest.skip(f"no mount namespace here: {backend.sandbox.notes}")
    tree = copy_of_the_source_below_tmp()
    try:
        backend.sandbox = dataclasses.replace(backend.sandbox, pythonpath=str(tree))
        handle = await backend.create(ContainerSpec("c-tmp-tree", "python:3", 128, 1, {}))
        try:
            code = "def main(a):\n    return {'ok': a['x']}\n"
            assert post(handle.url + "/init", {"value": {"code": code}}, handle.secret)[0] == 200
            assert post(handle.url + "/run", {"value": {"x": 1}}, handle.secret) == (
                200,
                {"ok": 1},
            )
        finally:
            await backend.remove(handle, grace=1)
    finally:
        await backend.close()
        shutil.rmtree(tree, ignore_errors=True)
