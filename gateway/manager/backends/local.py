"""Containers as local runtime processes on a loopback port, each started through the
sandbox launcher ``python -m gateway.runtime.sandbox`` (see it, and ``sandboxing`` for the
options: uid per container, namespaces, limits, scrubbed environment, private work directory).

- Each container is its own session / process group (so a terminal's Ctrl-C does not hit it
  mid-activation and signals reach everything it started); the manager stops them itself.
- Memory: ``RLIMIT_AS`` of ``2 x limits.memory + 1 GiB`` (generous: address space, not RSS,
  and the runtime's per-connection threads reserve stack space).
- stdout/stderr go to files in the container's state directory, not pipes: a pipe would break
  the runtime when the manager restarts, and routers read the files to split the logs.
- ``<state_dir>/containers/<id>/container.json`` records pid, port, the process start time
  (from ``/proc``, so a reused pid is not mistaken for ours), the labels, the uid, the work
  directory and the container's secret; ``list()`` after a restart returns the containers
  whose process is still alive and removes stale records. The state directory and everything
  in it is the manager's user's only (0700 directories, 0600 files): actions run as another
  uid and cannot read secrets, logs or records; the secret reaches the runtime over a pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway.manager.backends.base import (
    BackendError,
    ContainerGone,
    ContainerHandle,
    ContainerSpec,
    Status,
    new_secret,
)
from gateway.manager.backends.cgroups import (
    CgroupError,
    Cgroups,
    default_total,
    limit_files,
    manager_key,
    pid_max,
)
from gateway.manager.backends.sandboxing import Sandbox, SandboxOptions
from gateway.supervision import GracefulStop, StartError, StartWatch

log = logging.getLogger("gateway.manager.local")

#: How long a SIGKILLed container may take to go before ``remove`` returns regardless.
KILL_WAIT = 2.0


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
        python: str | None = None,
        start_timeout: float = 10.0,
        host: str = "127.0.0.1",
        **sandbox: str,
    ) -> None:
        """``sandbox``: the ``--backend-option`` names of ``SandboxOptions`` (strings; they win
        over ``APF_LOCAL_<NAME>`` variables)."""
        self.sandbox = Sandbox.resolve(SandboxOptions.from_os(sandbox), python)
        self.state_dir = Path(state_dir)
        self.cgroups = self._cgroups()
        for note in self.sandbox.notes:
            log.warning("sandbox: %s", note)
        self.root = self.state_dir / "containers"
        self.root.mkdir(parents=True, exist_ok=True)
        for folder in (self.state_dir, self.root):
            folder.chmod(0o700)
        self.python = self.sandbox.python
        self.start_timeout = start_timeout
        self.host = host
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._uids: dict[str, int] = {}  # container id -> its uid (per-container mode)
        self._creating: set[str] = set()  # ids whose cgroup exists before their record

    def _cgroups(self) -> Cgroups | None:
        """The manager's cgroups, or None with a note saying the limits are per process."""
        options = self.sandbox.options
        if options.cgroups == "off":
            return None
        total = options.max_processes_total or default_total(pid_max())
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            key = manager_key(self.state_dir)
            return Cgroups.setup(options.cgroup_parent, key, total)
        except CgroupError as exc:
            if options.cgroups == "on":
                raise ValueError(f"--backend-option cgroups=on: {exc}") from None
            self.sandbox.notes.append(
                f"no cgroups ({exc}): limits.memory, max_processes and cpus bound each "
                "process, not the container"
            )
            return None

    # ---- lifecycle -----------------------------------------------------------------------
    async def create(self, spec: ContainerSpec) -> ContainerHandle:
        folder = self.root / spec.id
        folder.mkdir(mode=0o700, parents=True, exist_ok=False)
        secret = spec.secret or new_secret()  # never an open runtime, whoever forgot it
        runtime = ["--host", self.host, "--port", "0"]
        if spec.concurrency is not None:
            runtime += ["--concurrency", str(spec.concurrency)]
        self._creating.add(spec.id)
        try:
            return await self._create(spec, folder, secret, runtime)
        finally:
            self._creating.discard(spec.id)

    async def _create(
        self, spec: ContainerSpec, folder: Path, secret: str, runtime: list[str]
    ) -> ContainerHandle:
        stdout_path, stderr_path = folder / "stdout.log", folder / "stderr.log"
        try:
            uid, gid = self.sandbox.uid_for(spec.id, set(self._uids.values()))
            workdir = self._workdir(spec.id, uid, gid)
        except (ValueError, OSError) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise BackendError(f"cannot prepare the sandbox: {exc}") from exc
        try:
            cgroups = self._cgroup_for(spec)
        except CgroupError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(workdir, ignore_errors=True)
            raise BackendError(f"cannot prepare the sandbox: {exc}") from exc
        config = self.sandbox.config(
            host=self.host,
            runtime=runtime,
            workdir=workdir,
            uid=uid,
            gid=gid,
            memory_mb=spec.memory_mb,
            env=spec.env,
            secret=secret,
            cgroups=cgroups,
        )
        try:
            proc = self._spawn(config, stdout_path, stderr_path)
        except BackendError:
            self._discard(spec.id, folder, workdir)
            raise
        self._children[proc.pid] = proc
        try:
            port = await self._wait_listening(proc, stdout_path, stderr_path)
        except BaseException:  # failed, or cancelled (a manager stopping): leave nothing behind
            self._kill_now(proc.pid)
            self._discard(spec.id, folder, workdir)
            raise
        if uid is not None and self.sandbox.per_container:
            self._uids[spec.id] = uid
        record = {
            "id": spec.id,
            "pid": proc.pid,
            "port": port,
            "start_time": _start_time(proc.pid),
            "created": time.time(),
            "labels": spec.labels,
            "uid": uid,
            "workdir": workdir,
            "secret": secret,
        }
        self._write(folder, record)
        return self._handle(folder, record)

    def _cgroup_for(self, spec: ContainerSpec) -> list[str]:
        if self.cgroups is None:
            return []
        options = self.sandbox.options
        files = limit_files(
            self.cgroups.version,
            memory_mb=spec.memory_mb,
            max_processes=options.max_processes,
            cpus=options.cpus,
        )
        return self.cgroups.create(spec.id, files)

    def _discard(self, cid: str, folder: Path, workdir: str) -> None:
        if self.cgroups is not None:
            self.cgroups.remove(cid)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)

    def _workdir(self, cid: str, uid: int | None, gid: int | None) -> str:
        """An empty directory only the container's uid may use (0700)."""
        path = tempfile.mkdtemp(prefix=f"apf-{cid}-", dir=self.sandbox.options.workdirs or None)
        if uid is not None and gid is not None:
            os.chown(path, uid, gid)
        return path

    def _spawn(
        self, config: dict[str, Any], stdout_path: Path, stderr_path: Path
    ) -> subprocess.Popen[bytes]:
        argv = [self.python, "-s", "-m", "gateway.runtime.sandbox", "--config-fd"]
        read, write = os.pipe()
        try:
            with os.fdopen(write, "wb") as pipe:  # small: fits the pipe buffer before start
                pipe.write(json.dumps(config).encode())
            # append mode: a router may empty a file the runtime writes to (router.logs)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            out = os.open(stdout_path, flags, 0o600)
            err = os.open(stderr_path, flags, 0o600)
            try:
                return subprocess.Popen(
                    [*argv, str(read)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=self.sandbox.launcher_env(),
                    cwd="/",
                    pass_fds=(read,),
                    start_new_session=True,
                )
            finally:
                os.close(out)
                os.close(err)
        except OSError as exc:
            raise BackendError(f"cannot start the runtime: {exc}") from exc
        finally:
            os.close(read)

    @staticmethod
    def _listening_port(path: Path) -> int | None:
        """The port of the runtime's first stdout line, once it is complete."""
        with open(path, "rb") as f:
            data = f.read(256)
        if b"\n" not in data:
            return None
        line = data.split(b"\n", 1)[0].decode(errors="replace").strip()
        name, _, port = line.partition(" ")
        if name == "LISTENING" and port.isdigit():
            return int(port)
        raise BackendError(f"the runtime printed {line!r} instead of LISTENING <port>")

    async def _wait_listening(
        self, proc: subprocess.Popen[bytes], stdout_path: Path, stderr_path: Path
    ) -> int:
        watch = StartWatch(
            "the runtime",
            proc,
            stderr_path,
            lambda: self._listening_port(stdout_path),
            timeout=self.start_timeout,
        )
        delay = 0.001
        try:
            while (port := watch.poll()) is None:
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, 0.02)
        except StartError as exc:
            raise BackendError(str(exc)) from None
        return port

    async def remove(self, handle: ContainerHandle, grace: float) -> None:
        pid = int(handle.data["pid"])
        await self._stop(pid, handle.data.get("start_time"), grace).wait_async()
        self._reap(pid)
        self._forget(self.root / handle.id)

    def _forget(self, folder: Path) -> None:
        """Remove a container's state and work directories and its cgroup, killing what
        is left there (its process is gone; an orphan that left its process group is not)."""
        self._uids.pop(folder.name, None)
        if self.cgroups is not None:
            self.cgroups.remove(folder.name)
        with contextlib.suppress(OSError, ValueError):
            workdir = json.loads((folder / "container.json").read_text()).get("workdir")
            if workdir and Path(workdir).name.startswith(f"apf-{folder.name}-"):
                shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)

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
                if record.get("uid") is not None and self.sandbox.per_container:
                    self._uids[record["id"]] = int(record["uid"])
            else:
                self._forget(folder)
        if self.cgroups is not None:  # a manager that died between cgroup and record
            live = {h.id for h in found} | self._creating
            for stale in self.cgroups.children() - live:
                self.cgroups.remove(stale)
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
            "logs": {
                "stdout": str(folder / "stdout.log"),
                "stderr": str(folder / "stderr.log"),
                "append": True,
            },
        }

    async def close(self) -> None:
        for pid in list(self._children):
            self._reap(pid)
        if self.cgroups is not None:
            self.cgroups.close()

    # ---- helpers -------------------------------------------------------------------------
    def _handle(self, folder: Path, record: dict[str, Any]) -> ContainerHandle:
        return ContainerHandle(
            id=record["id"],
            url=f"http://{self.host}:{record['port']}",
            labels=dict(record.get("labels", {})),
            created=float(record["created"]),
            data={"pid": record["pid"], "start_time": record.get("start_time")},
            secret=str(record.get("secret", "")),
        )

    @staticmethod
    def _write(folder: Path, record: dict[str, Any]) -> None:
        tmp = folder / "container.json.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(record))
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

    def _stop(self, pid: int, start_time: str | None, grace: float) -> GracefulStop:
        """SIGTERM to the container's process group (it may have no ``Popen`` here: a manager
        restart), SIGKILL after ``grace``; every signal only while ``_alive`` finds the pid
        still ours (its start time), never to a process that reused it."""
        alive = functools.partial(self._alive, pid, start_time)
        return GracefulStop.group(pid, alive, grace=grace, kill_wait=KILL_WAIT)

    def _kill_now(self, pid: int) -> None:
        """SIGKILL to a runtime that never served (no grace: it ran nothing), blocking until
        it is reaped (at most ``KILL_WAIT``): it runs in a cancelled task too."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        proc = self._children.get(pid)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_WAIT)

    def _reap(self, pid: int) -> None:
        proc = self._children.pop(pid, None)
        if proc is not None and proc.poll() is None:
            self._children[pid] = proc  # still running: keep tracking it
