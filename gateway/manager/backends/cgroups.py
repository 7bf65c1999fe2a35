"""A cgroup per local container, so that ``limits.memory``, ``max_processes`` and ``cpus``
bound the container (all its processes together), not each process.

Layout, as Docker's ``--cgroup-parent`` (default ``/docker``) and the kubelet's
``--cgroup-root``: ``<hierarchy>/<cgroup_parent>/<manager key>/<container id>``, where the
manager key is a hash of the state directory (two managers on one host never touch each
other's cgroups; a restarted manager finds its own). The manager's cgroup holds
``max_processes_total`` (pids of all its containers together); each container's cgroup holds
its memory, pids and CPU limits. cgroup v2 (``memory.max``, ``memory.swap.max``,
``memory.oom.group``, ``pids.max``, ``cpu.max``) where the unified hierarchy has the
``memory`` and ``pids`` controllers, else v1 (``memory.limit_in_bytes`` and
``memory.memsw.limit_in_bytes``, ``pids.max``, ``cpu.cfs_quota_us``).

``limit_files`` and ``parse_mounts`` are pure; ``Cgroups`` is the I/O shell. The launcher
joins the cgroup itself (it writes its pid to ``cgroup.procs`` before it forks or runs
anything of the action's).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("gateway.manager.local")

MIB = 1024 * 1024
CPU_PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "pids", "cpu")
REQUIRED = ("memory", "pids")
SWAP_FILES = ("memory.memsw.limit_in_bytes", "memory.swap.max")
#: How long ``remove`` keeps killing what is left in a container's cgroup before giving up.
REMOVE_WAIT = 1.0


def limit_files(
    version: int, *, memory_mb: int, max_processes: int, cpus: float
) -> dict[str, dict[str, str]]:
    """controller ("" for v2's single hierarchy) -> file -> value, in the order to write
    (v1's memsw limit may not go below the memory limit, so the memory limit comes first)."""
    memory = str(memory_mb * MIB)
    quota = str(int(cpus * CPU_PERIOD_US)) if cpus > 0 else ""
    if version == 2:
        files = {
            "memory.max": memory,
            "memory.swap.max": "0",
            "memory.oom.group": "1",  # an OOM kills the whole container, not one process
            "pids.max": str(max_processes),
        }
        if quota:
            files["cpu.max"] = f"{quota} {CPU_PERIOD_US}"
        return {"": files}
    out = {
        "memory": {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory},
        "pids": {"pids.max": str(max_processes)},
    }
    if quota:
        out["cpu"] = {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": quota}
    return out


def parse_mounts(mountinfo: str) -> tuple[str | None, dict[str, str]]:
    """The cgroup2 mount point (or None) and the v1 mount point of each controller, from
    ``/proc/self/mountinfo``."""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        point = fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2" and v2 is None:
            v2 = point
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in V1_CONTROLLERS:
                    v1.setdefault(option, point)
    return v2, v1


def manager_key(state_dir: Path) -> str:
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def default_total(pid_max: int) -> int:
    """Half the host's pids: the containers together can never exhaust them."""
    return max(pid_max // 2, 64)


class CgroupError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Cgroups:
    """The manager's cgroup directories (one per v1 controller, one for v2)."""

    version: int
    bases: dict[str, Path]  # controller ("" for v2) -> <hierarchy>/<parent>/<key>

    @classmethod
    def setup(cls, parent: str, key: str, total_processes: int) -> Cgroups:
        """Create the manager's cgroup(s) with the total pids cap, or say why not."""
        if os.geteuid() != 0:
            raise CgroupError("not running as root")
        try:
            v2, v1 = parse_mounts(Path("/proc/self/mountinfo").read_text())
        except OSError as exc:
            raise CgroupError(f"cannot read /proc/self/mountinfo: {exc.strerror}") from None
        relative = Path(parent.strip("/") or "apf-gateway") / key
        try:
            if v2 is not None and set(REQUIRED) <= _controllers(Path(v2)):
                base = Path(v2) / relative
                _enable_v2(Path(v2), base)
                cgroups = cls(2, {"": base})
            elif set(REQUIRED) <= set(v1):
                bases = {c: Path(v1[c]) / relative for c in V1_CONTROLLERS if c in v1}
                for path in bases.values():
                    path.mkdir(parents=True, exist_ok=True)
                cgroups = cls(1, bases)
            else:
                raise CgroupError("no cgroup hierarchy with the memory and pids controllers")
            pids = cgroups.bases["" if cgroups.version == 2 else "pids"]
            _write(pids, "pids.max", str(total_processes))
        except OSError as exc:
            raise CgroupError(f"cannot set up {relative}: {exc}") from None
        return cgroups

    def create(self, cid: str, files: dict[str, dict[str, str]]) -> list[str]:
        """Make the container's cgroup(s) with its limits; the ``cgroup.procs`` files the
        launcher joins."""
        procs = []
        try:
            for controller, base in self.bases.items():
                path = base / cid
                path.mkdir(exist_ok=False)
                for name, value in files.get(controller, {}).items():
                    if name in SWAP_FILES and not (path / name).exists():
                        continue  # a kernel without swap accounting
                    _write(path, name, value)
                procs.append(str(path / "cgroup.procs"))
        except OSError as exc:
            self.remove(cid)
            raise CgroupError(f"cannot create the cgroup of {cid}: {exc}") from None
        return procs

    def remove(self, cid: str) -> bool:
        """Kill whatever is left in the container's cgroup (an escaped orphan) and remove it;
        False if something was still there after ``REMOVE_WAIT``."""
        done = True
        for base in self.bases.values():
            path = base / cid
            deadline = time.monotonic() + REMOVE_WAIT
            while path.exists():
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.warning("cannot remove cgroup %s: %s", path, exc.strerror)
                        done = False
                        break
                _kill_all(path)
                time.sleep(0.01)
        return done

    def close(self) -> None:
        """Remove the manager's own cgroup(s) once no container is left in them (a manager
        keeping its containers over a restart leaves them)."""
        for base in self.bases.values():
            try:
                base.rmdir()
            except OSError:
                continue

    def children(self) -> set[str]:
        found: set[str] = set()
        for base in self.bases.values():
            if base.is_dir():
                found |= {p.name for p in base.iterdir() if p.is_dir()}
        return found

    def file(self, cid: str, controller: str, name: str) -> Path:
        """A file of a container's cgroup (``controller`` is ignored on v2)."""
        return self.bases["" if self.version == 2 else controller] / cid / name


def _controllers(root: Path) -> set[str]:
    try:
        return set((root / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def _enable_v2(root: Path, base: Path) -> None:
    """Delegate memory, pids and cpu down to ``base``. The no-internal-processes rule: a
    cgroup other than the root may not both hold processes and enable controllers for its
    children; if the manager is the only process in the way, it moves into a leaf."""
    wanted = [c for c in ("memory", "pids", "cpu") if c in _controllers(root)]
    level = root
    for part in (*base.relative_to(root).parts, None):
        try:
            _write(level, "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        except OSError as exc:
            if exc.errno != errno.EBUSY or not _only_me(level):
                raise
            leaf = level / "apf-gateway-manager"
            leaf.mkdir(exist_ok=True)
            _write(leaf, "cgroup.procs", str(os.getpid()))
            _write(level, "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        if part is None:
            break
        level = level / part
        level.mkdir(exist_ok=True)


def _only_me(path: Path) -> bool:
    pids = (path / "cgroup.procs").read_text().split()
    return pids == [str(os.getpid())]


def _kill_all(path: Path) -> None:
    kill = path / "cgroup.kill"
    if kill.exists():
        try:
            kill.write_text("1")
            return
        except OSError:
            pass
    try:
        pids = (path / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            continue


def _write(path: Path, name: str, value: str) -> None:
    with open(path / name, "w") as f:
        f.write(value)


def pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 32768
