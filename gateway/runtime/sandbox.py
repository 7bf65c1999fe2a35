"""``python -m gateway.runtime.sandbox --config-fd FD``: confine, then become the runtime.

The local backend starts every container through this launcher. It reads its configuration
(JSON, including the container's secret) from the inherited pipe ``FD``, binds the runtime's
listening socket while still in the host's network namespace, and then, in this order:

0. Joins the container's cgroups (``cgroups``: the ``cgroup.procs`` files the backend made),
   so every process it and the action start counts against the container's limits.
1. ``unshare`` new mount, PID and IPC namespaces (and a network namespace when ``network`` is
   ``none``: the socket bound before keeps serving the router on the host's loopback, the
   action has no network but a loopback of its own) and forks: the child is PID 1 of the new
   PID namespace, the parent waits for it and exits with its status (it is what the backend's
   pid and process group refer to). The child mounts a fresh ``/proc`` (only its own
   processes are visible), bind-mounts its private work directory over ``/tmp`` and gets a
   ``/dev/shm`` of its own (64 MiB).
2. Resource limits (``RLIMIT_AS``, ``RLIMIT_NOFILE``, ``RLIMIT_NPROC``, ``RLIMIT_CPU``, no
   core dumps), ``chdir`` to the work directory, umask 077.
3. Drops to the configured uid/gid with no supplementary groups, then ``PR_SET_NO_NEW_PRIVS``.
4. Replaces the environment with the configured one and runs ``gateway.runtime`` in this same
   process (no second interpreter start-up), handing it the secret and the socket.

Namespaces are skipped when the configuration says so (the backend calls ``probe`` once to
learn whether ``unshare`` is permitted at all: it needs ``CAP_SYS_ADMIN``, i.e. root here).
Anything failing before the runtime starts exits 3 with the reason on stderr.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
BASE_FLAGS = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC


class SandboxError(Exception):
    pass


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(errno)}")


def _unshare(flags: int) -> None:
    unshare = getattr(os, "unshare", None)  # Python 3.12+
    if unshare is not None:
        try:
            unshare(flags)
        except OSError as exc:
            raise SandboxError(f"unshare: {exc.strerror}") from None
        return
    _check(_libc().unshare(flags), "unshare")


def _mount(
    source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None = None
) -> None:
    _check(_libc().mount(source, target, fstype, flags, data), f"mount {target.decode()}")


def probe(network_none: bool) -> str:
    """``ok`` if a child may ``unshare`` the namespaces the sandbox uses, else the reason."""
    flags = BASE_FLAGS | (CLONE_NEWNET if network_none else 0)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        try:
            _unshare(flags)
            message = b"ok"
        except SandboxError as exc:
            message = str(exc).encode()
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        answer = f.read().decode()
    os.waitpid(pid, 0)
    return answer or "the probe died"


def _wait_for(child: int) -> None:
    """The parent outside the namespaces: exit as the child does (signals reach both: the
    child is in this process group)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(child, 0)
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        if os.WIFSIGNALED(status):
            os._exit(128 + os.WTERMSIG(status))


def _loopback_up() -> None:
    """A new network namespace starts with ``lo`` down; actions may still want 127.0.0.1
    among their own processes (it reaches nothing of the host's)."""
    import fcntl  # noqa: PLC0415 - cold start
    import struct  # noqa: PLC0415 - cold start

    siocsifflags, iff_up_loopback_running = 0x8914, 0x1 | 0x8 | 0x40
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", iff_up_loopback_running))


def _enter_namespaces(config: dict[str, Any], sock: socket.socket) -> None:
    isolated = config.get("network") == "none"
    _unshare(BASE_FLAGS | (CLONE_NEWNET if isolated else 0))
    child = os.fork()
    if child:
        sock.close()
        _wait_for(child)
    libc = _libc()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if isolated:
        _loopback_up()
    _mount(b"none", b"/", None, MS_REC | MS_PRIVATE)
    workdir = config.get("workdir")
    if workdir:
        _mount(workdir.encode(), b"/tmp", None, MS_BIND)
        config["workdir"] = "/tmp"
    _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if os.path.isdir("/dev/shm"):  # POSIX shared memory: a small one of its own
        _mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=64m,mode=1777")


def _limit(config: dict[str, Any]) -> None:
    import resource  # noqa: PLC0415 - cold start

    for name, value in (config.get("rlimits") or {}).items():
        which = getattr(resource, f"RLIMIT_{name}")
        resource.setrlimit(which, (int(value), int(value)))


def _drop(config: dict[str, Any]) -> None:
    uid, gid = config.get("uid"), config.get("gid")
    if gid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
    if uid is not None:
        os.setresuid(uid, uid, uid)
    _check(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def confine(config: dict[str, Any]) -> socket.socket:
    """Everything up to handing over to the runtime; returns the listening socket."""
    # The runtime is loaded first: the source tree may sit below /tmp (a checkout there), which
    # the mount namespace covers with the container's own directory, and the uid switch may
    # take away read access to it. Only the standard library is imported lazily afterwards.
    import gateway.runtime.__main__  # noqa: PLC0415 - before /tmp is covered
    import gateway.runtime.action  # noqa: PLC0415 - before /tmp is covered
    import gateway.runtime.app  # noqa: PLC0415 - before /tmp is covered
    import gateway.runtime.context  # noqa: PLC0415 - before /tmp is covered
    import gateway.runtime.http  # noqa: F401, PLC0415 - before /tmp is covered

    for procs in config.get("cgroups") or []:  # before anything forks: children inherit it
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    sock = socket.create_server((config.get("host") or "127.0.0.1", 0), backlog=128)
    if config.get("namespaces"):
        _enter_namespaces(config, sock)
    _limit(config)
    if config.get("workdir"):
        os.chdir(config["workdir"])
    os.umask(0o077)
    _drop(config)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in (config.get("env") or {}).items()})
    return sock


def main(argv: list[str]) -> None:
    if argv[:1] == ["--probe"]:
        print(probe(argv[1:] == ["none"]))
        return
    if len(argv) != 2 or argv[0] != "--config-fd" or not argv[1].isdigit():
        sys.stderr.write("usage: python -m gateway.runtime.sandbox --config-fd FD\n")
        raise SystemExit(2)
    with open(int(argv[1]), "rb") as f:
        config = json.loads(f.read())
    secret = str(config.pop("secret", "")).encode() or None
    try:
        sock = confine(config)
    except (SandboxError, OSError, ValueError) as exc:
        sys.stderr.write(f"gateway.runtime.sandbox: {exc}\n")
        raise SystemExit(3) from None
    from gateway.runtime.__main__ import main as runtime_main  # noqa: PLC0415 - cold start

    runtime_main(list(config.get("runtime", [])), secret=secret, sock=sock)


if __name__ == "__main__":
    main(sys.argv[1:])
