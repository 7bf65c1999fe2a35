"""The local backend's sandbox settings: which user, namespaces, limits and interpreter.

Options come as ``--backend-option NAME=VALUE`` strings or ``APF_LOCAL_<NAME>`` variables
(``docs/platform.md``, "Isolation and trust"); ``SandboxOptions.parse`` validates them and
names the option in every error.
``Sandbox.resolve`` turns them into what this host can do: a uid per container when the
manager runs as root, namespaces when ``unshare`` is permitted, and an interpreter whose
standard library the unprivileged uid can read (a Python under ``/root`` cannot serve it).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.runtime.sandbox import probe

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
ENV_PREFIX = "APF_LOCAL_"
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SandboxOptions:
    user: str = "auto"  # auto (= per-container as root, else current) | per-container | NAME | UID
    uids: tuple[int, int] = (100000, 165535)  # the per-container range, inclusive
    network: str = "none"  # none (no network at all) | host (the host's, loopback included)
    namespaces: str = "auto"  # auto (when permitted) | on (required) | off
    python: str = ""  # the runtime's interpreter; "": this one if the uid can read it
    cpu_seconds: int = 3600  # RLIMIT_CPU over a container's life; 0: none
    max_files: int = 1024  # RLIMIT_NOFILE
    max_processes: int = 512  # pids.max of a container's cgroup; RLIMIT_NPROC per uid
    max_processes_total: int = 0  # pids.max of all containers together; 0: half of pid_max
    cpus: float = 1.0  # cpu.max of a container's cgroup, in CPUs; 0: none
    cgroups: str = "auto"  # auto (as root, where writable) | on (required) | off
    cgroup_parent: str = "apf-gateway"  # below each hierarchy's root, as Docker's
    workdirs: str = ""  # where work directories are made; "": the system temp dir

    @classmethod
    def from_os(cls, options: dict[str, Any]) -> SandboxOptions:
        """``APF_LOCAL_<NAME>`` environment variables, the given options winning (so that
        ``APF_LOCAL_NETWORK=host apf-gateway up`` reaches the manager ``up`` starts)."""
        env = {
            name: os.environ[f"{ENV_PREFIX}{name.upper()}"]
            for name in cls.__slots__
            if f"{ENV_PREFIX}{name.upper()}" in os.environ and name not in options
        }
        for name, value in env.items():  # an error names the variable
            _parse_one(name, value.strip(), source=f"{ENV_PREFIX}{name.upper()}: ")
        return cls.parse({**env, **options})

    @classmethod
    def parse(cls, options: dict[str, Any]) -> SandboxOptions:
        known = {f for f in cls.__slots__ if not f.startswith("_")}
        out: dict[str, Any] = {}
        for name, raw in options.items():
            if name not in known:
                raise ValueError(
                    f"--backend-option {name}: unknown for the local backend; "
                    f"choose from {sorted(known)}"
                )
            value = str(raw).strip()
            out[name] = _parse_one(name, value)
        return cls(**out)


def _parse_one(name: str, value: str, source: str = "--backend-option ") -> Any:
    where = f"{source}{name}={value}"
    if name in ("cpu_seconds", "max_files", "max_processes", "max_processes_total"):
        zero = name == "max_processes_total"  # 0: the default
        if not value.isdigit() or (
            name != "cpu_seconds" and int(value) < 16 and not (zero and int(value) == 0)
        ):
            raise ValueError(f"{where}: expected an integer (at least 16 for limits, 0 for none)")
        return int(value)
    if name == "cpus":
        try:
            cpus = float(value)
        except ValueError:
            cpus = -1.0
        if not (cpus == 0 or 0.01 <= cpus <= 1024):
            raise ValueError(f"{where}: expected a number of CPUs (e.g. 0.5, 2; 0 for none)")
        return cpus
    if name == "cgroup_parent":
        if not value.strip("/") or ".." in value.split("/"):
            raise ValueError(f"{where}: expected a path below the cgroup root, e.g. apf-gateway")
        return value
    if name == "uids":
        low, sep, high = value.partition("-")
        if not sep or not low.isdigit() or not high.isdigit() or not 0 < int(low) <= int(high):
            raise ValueError(f"{where}: expected FIRST-LAST, e.g. 100000-165535")
        return (int(low), int(high))
    choices = {
        "network": ("none", "host"),
        "namespaces": ("auto", "on", "off"),
        "cgroups": ("auto", "on", "off"),
    }
    if name in choices and value not in choices[name]:
        raise ValueError(f"{where}: expected one of {list(choices[name])}")
    if name == "user" and not value:
        raise ValueError(f"{where}: expected auto, per-container, current, a user name or a uid")
    return value


def blocked(path: str, *, directory: bool) -> str | None:
    """The first component of ``path`` that 'other' users cannot traverse or read, if any."""
    p = Path(path).resolve()
    for parent in reversed(p.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return str(parent)
    mode = os.stat(p).st_mode
    need = (stat.S_IROTH | stat.S_IXOTH) if directory else stat.S_IROTH
    return None if mode & need == need else str(p)


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What the backend applies to every container (resolved once, at start)."""

    options: SandboxOptions
    python: str
    pythonpath: str
    uid: int | None = None  # a fixed uid for all containers; None with per_container
    gid: int | None = None
    per_container: bool = False
    namespaces: bool = False
    notes: list[str] = field(default_factory=list)  # what could not be applied, and why

    @classmethod
    def resolve(cls, options: SandboxOptions, python: str | None = None) -> Sandbox:
        notes: list[str] = []
        root = os.geteuid() == 0
        uid: int | None = None
        gid: int | None = None
        per_container = False
        user = options.user
        if user in ("auto", "per-container"):
            per_container = root
            if not root:
                notes.append("not running as root: actions run as the manager's own user")
        elif user != "current":
            if not root:
                raise ValueError(f"--backend-option user={user}: switching users needs root")
            uid, gid = _user(user)
        elif root:
            notes.append("user=current as root: actions run as root")
        switching = per_container or uid is not None
        pythonpath = str(Path(__file__).resolve().parents[3])
        # the runtime's modules are imported before the uid switch; only the standard
        # library (imported lazily, by the runtime and by actions) must stay readable
        chosen = python or options.python or _interpreter(switching)
        namespaces = False
        if options.namespaces != "off":
            answer = probe(options.network == "none")
            namespaces = answer == "ok"
            if not namespaces:
                if options.namespaces == "on":
                    raise ValueError(f"--backend-option namespaces=on: {answer}")
                notes.append(f"no namespaces ({answer}): actions see the host's processes")
        if not namespaces and options.network == "none":
            notes.append("network=none needs namespaces: actions use the host's network")
        return cls(options, chosen, pythonpath, uid, gid, per_container, namespaces, notes)

    def uid_for(self, cid: str, used: set[int]) -> tuple[int | None, int | None]:
        """A uid of the range no live container has (per container), else the fixed one."""
        if not self.per_container:
            return self.uid, self.gid
        low, high = self.options.uids
        size = high - low + 1
        start = int.from_bytes(hashlib.sha256(cid.encode()).digest()[:8], "big") % size
        for step in range(size):
            candidate = low + (start + step) % size
            if candidate not in used:
                return candidate, candidate
        raise ValueError("every uid of --backend-option uids is in use")

    def rlimits(self, memory_mb: int) -> dict[str, int]:
        """Address space is generous (2 x limits.memory + 1 GiB): it is not RSS, and every
        connection thread reserves stack."""
        out = {
            "AS": (2 * memory_mb + 1024) * MIB,
            "NOFILE": self.options.max_files,
            "CORE": 0,
        }
        if self.per_container or self.uid is not None:
            out["NPROC"] = self.options.max_processes  # counted per uid: only when ours
        if self.options.cpu_seconds:
            out["CPU"] = self.options.cpu_seconds
        return out

    def launcher_env(self) -> dict[str, str]:
        """The launcher's whole environment: nothing of the manager's (keys, tokens)."""
        return {"PATH": SAFE_PATH, "PYTHONPATH": self.pythonpath, "PYTHONUNBUFFERED": "1"}

    def config(
        self,
        *,
        host: str,
        runtime: list[str],
        workdir: str,
        uid: int | None,
        gid: int | None,
        memory_mb: int,
        env: dict[str, str],
        secret: str,
        cgroups: list[str] | None = None,
    ) -> dict[str, Any]:
        home = "/tmp" if self.namespaces else workdir
        base = {
            "PATH": SAFE_PATH,
            "PYTHONUNBUFFERED": "1",
            "LANG": "C.UTF-8",
            "HOME": home,
            "TMPDIR": home,
        }
        return {
            "host": host,
            "runtime": runtime,
            "workdir": workdir,
            "uid": uid,
            "gid": gid,
            "namespaces": self.namespaces,
            "network": self.options.network,
            "rlimits": self.rlimits(memory_mb),
            "env": {**base, **env},
            "secret": secret,
            "cgroups": cgroups or [],
        }


def _user(user: str) -> tuple[int, int]:
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        if user.isdigit():
            return int(user), int(user)
        raise ValueError(f"--backend-option user={user}: no such user") from None
    if entry.pw_uid == 0:
        raise ValueError(f"--backend-option user={user}: that is root; use user=current")
    return entry.pw_uid, entry.pw_gid


def _interpreter(switching: bool) -> str:
    """This interpreter, unless the actions' uid could not read its standard library; then a
    system Python 3.11+ whose library it can read."""

    if not switching or blocked(sysconfig.get_path("stdlib"), directory=True) is None:
        return sys.executable
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if not os.path.exists(candidate) or blocked(candidate, directory=False):
            continue
        probe = (
            "import sys, sysconfig; print(sys.version_info >= (3, 11)); "
            "print(sysconfig.get_path('stdlib'))"
        )
        try:
            out = subprocess.run(
                [candidate, "-c", probe], capture_output=True, text=True, timeout=10, check=True
            ).stdout.split("\n")
        except (OSError, subprocess.SubprocessError):
            continue
        if out[0] == "True" and blocked(out[1], directory=True) is None:
            return candidate
    where = blocked(sysconfig.get_path("stdlib"), directory=True)
    raise ValueError(
        f"--backend-option python: the standard library of {sys.executable} is not readable "
        f"by the actions' unprivileged uid ({where} is closed to other users) and no readable "
        "system Python 3.11+ was found; name one"
    )
