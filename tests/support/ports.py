"""Ports for servers a test must name before they bind (a ``serve`` or ``up`` subprocess told
``--listen 127.0.0.1:PORT``), and for addresses where nothing may listen.

Asking the kernel for a free port and closing it races: under pytest-xdist another worker's
``bind(0)``, or an outgoing connection, can be handed the same port before the subprocess binds
it, and the test then talks to somebody else's server. So each process claims a block of ports
below the kernel's ephemeral range (where ``bind(0)`` and ``connect`` never pick) by holding a
lock file for its lifetime, and hands them out in turn, skipping any that something else holds.
Blocks are claimed across concurrent pytest sessions too (the compiled build's inner run).
"""

from __future__ import annotations

import fcntl
import itertools
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

FIRST, BLOCK = 20_000, 400  # 20000-32399: below Linux's default ephemeral range (32768-60999)
BLOCKS = 31
_LOCKS = Path(tempfile.gettempdir()) / "apf-gateway-test-ports"


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _claim() -> tuple[IO[bytes], range]:
    """A block no other live process holds: its lock stays held until this process exits."""
    _LOCKS.mkdir(exist_ok=True)
    floor = _ephemeral_floor()
    for index in range(BLOCKS):
        ports = range(FIRST + index * BLOCK, FIRST + (index + 1) * BLOCK)
        if ports.stop > floor:
            break
        lock = (_LOCKS / f"block-{index}").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return lock, ports
    raise RuntimeError(f"no free block of test ports below {floor} (locks in {_LOCKS})")


def _ports() -> Iterator[int]:
    lock, ports = _claim()
    _held.append(lock)
    return itertools.cycle(ports)


_held: list[IO[bytes]] = []
_next: Iterator[int] | None = None


def free_port() -> int:
    """A port of this process's block that nothing listens on or holds now."""
    global _next  # noqa: PLW0603 - one block per process, claimed on first use
    if _next is None:
        _next = _ports()
    for port in itertools.islice(_next, BLOCK):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # held by something outside the tests
            return port
    raise RuntimeError("every port of this process's test block is in use")
