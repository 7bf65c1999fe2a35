"""Containers as local runtime processes: ``python -m gateway.runtime`` on a loopback port.

- Each container is its own session / process group (so a terminal's Ctrl-C does not hit it
  mid-activation and signals reach everything it started); the manager stops them itself.
- Memory: ``RLIMIT_AS`` of ``2 x limits.memory + 1 GiB`` (generous: address space, not RSS,
  and the runtime's per-connection threads reserve stack space).
- stdout/stderr go to files in the container's state directory, not pipes: a pipe would break
  the runtime when the manager restarts, and routers read the files to split the logs.
- ``<state_dir>/containers/<id>/container.json`` records pid, port, the process start time
  (from ``/proc``, so a reused pid is not mistaken for ours) and the labels; ``list()`` after a
  restart returns the containers whose process is still alive and removes stale records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gateway.manager.backends.base import (
    BackendError,
    ContainerGone,
    ContainerHandle,
    ContainerSpec,
    Status,
)

MIB = 1024 * 1024


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


class LocalProcessBackend:
    name = "local"

    def __init__(
        self,
        state_dir: str | Path,
        *,
        python: str = sys.executable,
        start_timeout: float = 10.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.root = Path(state_dir) / "containers"
        self.root.mkdir(parents=True, exist_ok=True)
        self.python = python
        self.start_timeout = start_timeout
        self.host = host
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # ---- lifecycle -----------------------------------------------------------------------
    async def create(self, spec: ContainerSpec) -> ContainerHandle:
        folder = self.root / spec.id
        folder.mkdir(parents=True, exist_ok=False)
        stdout_path, stderr_path = folder / "stdout.log", folder / "stderr.log"
        argv = [self.python, "-m", "gateway.runtime", "--host", self.host, "--port", "0"]
        if spec.concurrency is not None:
            argv += ["--concurrency", str(spec.concurrency)]
        limit = (2 * spec.memory_mb + 1024) * MIB
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        proc = self._spawn(argv, env, limit, stdout_path, stderr_path, folder)
        self._children[proc.pid] = proc
        try:
            port = await self._wait_listening(proc, stdout_path, stderr_path)
        except BaseException:  # also cancelled (the manager stopping): leave no process
            self._kill_now(proc.pid)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        record = {
            "id": spec.id,
            "pid": proc.pid,
            "port": port,
            "start_time": _start_time(proc.pid),
            "created": time.time(),
            "labels": spec.labels,
        }
        self._write(folder, record)
        return self._handle(folder, record)

    @staticmethod
    def _spawn(
        argv: list[str],
        env: dict[str, str],
        limit: int,
        stdout_path: Path,
        stderr_path: Path,
        folder: Path,
    ) -> subprocess.Popen[bytes]:
        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            try:
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    start_new_session=True,
                    preexec_fn=preexec,  # noqa: PLW1509 - only setrlimit
                )
            except OSError as exc:
                shutil.rmtree(folder, ignore_errors=True)
                raise BackendError(f"cannot start the runtime: {exc}") from exc

    @staticmethod
    def _first_line(path: Path) -> str | None:
        with open(path, "rb") as f:
            data = f.read(256)
        if b"\n" not in data:
            return None
        return data.split(b"\n", 1)[0].decode(errors="replace").strip()

    @staticmethod
    def _tail(path: Path) -> str:
        return path.read_bytes()[-2000:].decode(errors="replace")

    async def _wait_listening(
        self, proc: subprocess.Popen[bytes], stdout_path: Path, stderr_path: Path
    ) -> int:
        deadline = time.monotonic() + self.start_timeout
        delay = 0.001
        while True:
            line = self._first_line(stdout_path)
            if line is not None:
                name, _, port = line.partition(" ")
                if name == "LISTENING" and port.isdigit():
                    return int(port)
                raise BackendError(f"the runtime printed {line!r} instead of LISTENING <port>")
            if proc.poll() is not None:
                tail = self._tail(stderr_path)
                raise BackendError(f"the runtime exited with {proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise BackendError(f"the runtime did not listen within {self.start_timeout} s")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.02)

    async def remove(self, handle: ContainerHandle, grace: float) -> None:
        pid = int(handle.data["pid"])
        if self._alive(pid, handle.data.get("start_time")):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
                os.killpg(pid, signal.SIGCONT)
            deadline = time.monotonic() + grace
            while self._alive(pid, handle.data.get("start_time")):
                if time.monotonic() >= deadline:
                    self._kill_now(pid)
                    break
                await asyncio.sleep(0.01)
        self._reap(pid)
        shutil.rmtree(self.root / handle.id, ignore_errors=True)

    async def evict(self, handle: ContainerHandle, *, grace: float) -> bool:
        """Nothing here can refuse a disruption: always a graceful ``remove``."""
        await self.remove(handle, grace)
        return True

    async def pause(self, handle: ContainerHandle) -> None:
        self._signal(handle, signal.SIGSTOP)
        pid = int(handle.data["pid"])
        for _ in range(1000):  # the stop is delivered asynchronously: return once it took
            if _proc_state(pid) in ("T", None):
                return
            await asyncio.sleep(0.001)

    async def resume(self, handle: ContainerHandle) -> None:
        self._signal(handle, signal.SIGCONT)

    async def status(self, handle: ContainerHandle) -> Status:
        pid = int(handle.data["pid"])
        if not self._alive(pid, handle.data.get("start_time")):
            return Status.GONE
        return Status.PAUSED if _proc_state(pid) == "T" else Status.RUNNING

    async def list(self) -> list[ContainerHandle]:
        found = []
        for folder in sorted(self.root.iterdir()):
            try:
                record = json.loads((folder / "container.json").read_text())
            except (OSError, ValueError):
                if time.time() - folder.stat().st_mtime > self.start_timeout:
                    shutil.rmtree(folder, ignore_errors=True)  # a create that never finished
                continue
            if self._alive(int(record["pid"]), record.get("start_time")):
                found.append(self._handle(folder, record))
            else:
                shutil.rmtree(folder, ignore_errors=True)
        return found

    async def relabel(self, handle: ContainerHandle, labels: dict[str, str]) -> ContainerHandle:
        folder = self.root / handle.id
        try:
            record = json.loads((folder / "container.json").read_text())
        except (OSError, ValueError) as exc:
            raise ContainerGone(handle.id) from exc
        record["labels"] = labels
        self._write(folder, record)
        return self._handle(folder, record)

    def agent(self, handle: ContainerHandle) -> dict[str, Any]:
        folder = self.root / handle.id
        return {
            "pause": "signal",
            "pid": handle.data["pid"],
            "logs": {"stdout": str(folder / "stdout.log"), "stderr": str(folder / "stderr.log")},
        }

    async def close(self) -> None:
        for pid in list(self._children):
            self._reap(pid)

    # ---- helpers -------------------------------------------------------------------------
    def _handle(self, folder: Path, record: dict[str, Any]) -> ContainerHandle:
        return ContainerHandle(
            id=record["id"],
            url=f"http://{self.host}:{record['port']}",
            labels=dict(record.get("labels", {})),
            created=float(record["created"]),
            data={"pid": record["pid"], "start_time": record.get("start_time")},
        )

    @staticmethod
    def _write(folder: Path, record: dict[str, Any]) -> None:
        tmp = folder / "container.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(folder / "container.json")

    def _alive(self, pid: int, start_time: str | None) -> bool:
        proc = self._children.get(pid)
        if proc is not None:
            return proc.poll() is None
        now = _start_time(pid)
        return now is not None and (start_time is None or now == start_time)

    def _signal(self, handle: ContainerHandle, sig: signal.Signals) -> None:
        pid = int(handle.data["pid"])
        if not self._alive(pid, handle.data.get("start_time")):
            raise ContainerGone(handle.id)
        try:
            os.killpg(pid, sig)
        except ProcessLookupError as exc:
            raise ContainerGone(handle.id) from exc

    def _kill_now(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        proc = self._children.get(pid)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)

    def _reap(self, pid: int) -> None:
        proc = self._children.pop(pid, None)
        if proc is not None and proc.poll() is None:
            self._children[pid] = proc  # still running: keep tracking it
