"""Supervising local child processes: start, notice early exits, restart with back-off, stop
in order.

``Backoff`` is the pure restart policy (an injected clock; ``gateway.testing.FakeEventClock``
in tests). ``Child`` and ``Supervisor`` are the thin I/O shell: ``subprocess`` children whose
stderr goes to a log file, so that an exit can be explained by the last line written there.
``apf-gateway up`` is the first user; the shell is synchronous and polls, so it needs no event
loop of its own. ``StartWatch`` (a start: readiness, or an early exit or silence explained by the
log's last line) and ``GracefulStop`` / ``stop_process`` (signal, grace, SIGKILL; of a process
or a process group) are the pieces the local container backend and the load-test harness share
with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from gateway.clock import Clock

#: How much of a log's end is read to find its last line, and how much of that line is shown.
TAIL_BYTES = 8192
# What one ``drain`` moves at most: a child printing without pause (an access log to stdout
# under load) must not keep the supervisor's tick from its other children; the rest waits
# in the pipe for the next tick.
DRAIN_BYTES = 1024 * 1024
MAX_LINE = 500


@dataclass(frozen=True, slots=True)
class BackoffSettings:
    initial_seconds: float = 0.5
    factor: float = 2.0
    max_seconds: float = 30.0
    # a child that ran this long before exiting counts as healthy: its next restart is quick
    reset_after_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.initial_seconds < 0 or self.factor < 1 or self.max_seconds < self.initial_seconds:
            raise ValueError("back-off needs initial >= 0, factor >= 1 and max >= initial")


class Backoff:
    """Restart delays for one child: exponential from ``initial_seconds``, capped at
    ``max_seconds``, back to the start after ``reset_after_seconds`` of healthy running, so a
    crash loop slows down while a rare crash is repaired at once."""

    def __init__(self, clock: Clock, settings: BackoffSettings | None = None) -> None:
        self.clock = clock
        self.settings = settings or BackoffSettings()
        self.restarts = 0  # restarts so far, for logs
        self.failures = 0  # exits in a row without a healthy run in between
        self._started: float | None = None

    def started(self) -> None:
        self._started = self.clock.now()

    def exited(self) -> float:
        """The child exited: how long to wait before starting it again."""
        s = self.settings
        ran = self.clock.now() - self._started if self._started is not None else 0.0
        self._started = None
        if ran >= s.reset_after_seconds:
            self.failures = 0
        # the exponent stops growing once the cap is reached (a long crash loop must not
        # overflow the float)
        delay = min(s.max_seconds, s.initial_seconds * s.factor ** min(self.failures, 64))
        self.failures += 1
        self.restarts += 1
        return delay


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


def die_with_parent() -> None:
    """``preexec_fn``: SIGTERM when the parent dies (``PR_SET_PDEATHSIG``), so a child whose
    supervisor was killed with SIGKILL still shuts down gracefully."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def last_line(path: Path, since: int = 0) -> str:
    """The last non-blank line written to ``path`` after offset ``since``."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(since, end - TAIL_BYTES))
            data = f.read()
    except OSError:
        return ""
    lines = [x.strip() for x in data.decode(errors="replace").splitlines() if x.strip()]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= MAX_LINE else lines[-1][: MAX_LINE - 3] + "..."


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class StartError(Exception):
    """A child exited or stayed silent while starting; the message says why."""


def exited_at_start(name: str, code: int, log: Path, since: int = 0) -> StartError:
    why = last_line(log, since) or "(nothing in its log)"
    return StartError(f"{name} exited at start ({describe_exit(code)}): {why}")


T = TypeVar("T")


class StartWatch(Generic[T]):
    """One process's start. ``poll`` returns what ``check`` found once it finds something (an
    address, a port), ``None`` while the process starts; ``StartError`` naming the last line
    of ``log`` (after offset ``since``) once it exits or ``timeout`` passes first. Callers
    poll from a thread (``wait``) or an event loop (their own sleep between polls)."""

    def __init__(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        log: Path,
        check: Callable[[], T | None],
        *,
        timeout: float,
        clock: Clock | None = None,
        since: int = 0,
    ) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.check = check
        self.timeout = timeout
        self.clock: Clock = clock or MonotonicClock()
        self.since = since
        self.deadline = self.clock.now() + timeout

    def poll(self) -> T | None:
        found = self.check()
        if found is not None:
            return found
        code = self.proc.poll()
        if code is not None:
            raise exited_at_start(self.name, code, self.log, self.since)
        if self.clock.now() > self.deadline:
            why = last_line(self.log, self.since) or "(nothing in its log)"
            raise StartError(f"{self.name} did not start within {self.timeout:g} s: {why}")
        return None

    def wait(self, interval: float = 0.05) -> T:
        while (found := self.poll()) is None:
            time.sleep(interval)
        return found


class GracefulStop:
    """One stop with a grace period: ``sig`` at once, SIGKILL once ``grace`` s have passed and
    the process still runs, over once it is gone (or ``kill_wait`` s after the SIGKILL: a
    process stuck in the kernel is given up on). ``send`` delivers a signal (to one process, or
    a process group: ``group``); ``alive`` is asked before every signal, the caller's guard
    against signalling a pid the kernel has since given to another process. Callers poll from a
    thread (``wait``) or an event loop (their own sleep between polls), as with ``StartWatch``;
    the deadlines are on ``clock``."""

    def __init__(
        self,
        send: Callable[[int], None],
        alive: Callable[[], bool],
        *,
        grace: float,
        sig: int = signal.SIGTERM,
        kill_wait: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.send = send
        self.alive = alive
        self.kill_wait = kill_wait
        self.clock: Clock = clock or MonotonicClock()
        self.deadline = self.clock.now() + grace
        self.killed_at: float | None = None
        self.gone = False
        if alive():
            self._send(sig)
            self._send(signal.SIGCONT)  # a stopped (paused) process handles ``sig`` only now

    @classmethod
    def process(
        cls,
        proc: subprocess.Popen[bytes],
        *,
        grace: float,
        sig: int = signal.SIGTERM,
        kill_wait: float | None = None,
        clock: Clock | None = None,
    ) -> GracefulStop:
        """The stop of a child (its ``Popen`` reaps it and knows when its pid is no longer
        ours)."""
        alive = functools.partial(_running, proc)
        return cls(proc.send_signal, alive, grace=grace, sig=sig, kill_wait=kill_wait, clock=clock)

    @classmethod
    def group(
        cls,
        pgid: int,
        alive: Callable[[], bool],
        *,
        grace: float,
        kill_wait: float | None = None,
        clock: Clock | None = None,
    ) -> GracefulStop:
        """SIGTERM to process group ``pgid``, which may have no ``Popen`` here (the local
        backend's containers after a manager restart)."""
        send = functools.partial(os.killpg, pgid)
        return cls(send, alive, grace=grace, kill_wait=kill_wait, clock=clock)

    def _send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # gone since ``alive`` was asked
            self.send(sig)

    def poll(self) -> bool:
        """Whether the stop is over (``gone`` says how); SIGKILL when the grace is over."""
        if not self.alive():
            self.gone = True
            return True
        now = self.clock.now()
        if self.killed_at is None:
            if now >= self.deadline:
                self.killed_at = now
                self._send(signal.SIGKILL)
            return False
        return self.kill_wait is not None and now - self.killed_at >= self.kill_wait

    def wait(self, interval: float = 0.01) -> bool:
        """Poll until the stop is over; whether the process is gone."""
        while not self.poll():
            time.sleep(interval)
        return self.gone

    async def wait_async(self, interval: float = 0.01) -> bool:
        """``wait`` on an event loop."""
        while not self.poll():  # noqa: ASYNC110 - no event for another process's exit
            await asyncio.sleep(interval)
        return self.gone


def _running(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def stop_process(
    proc: subprocess.Popen[bytes],
    *,
    grace: float,
    sig: int = signal.SIGTERM,
    kill_wait: float | None = None,
) -> int:
    """``sig``, wait up to ``grace`` s, then SIGKILL (waiting up to ``kill_wait``, default for
    ever: ``subprocess.TimeoutExpired`` after it); the exit code."""
    if not GracefulStop.process(proc, grace=grace, sig=sig, kill_wait=kill_wait).wait():
        raise subprocess.TimeoutExpired(proc.args, kill_wait or 0.0)
    return int(proc.returncode)


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has bytes (or its end) within ``timeout`` s. ``poll``, as ``select``
    refuses descriptors from 1024 on (``FD_SETSIZE``), which a supervisor with many sockets
    open hands out."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, round(timeout * 1000))))


@dataclass(slots=True)
class Spec:
    name: str
    argv: list[str]
    log: Path
    announce: bool = True  # the child prints ``LISTENING URL`` on stdout when it serves
    restart: bool = True
    stop_timeout: float = 40.0  # stop_signal -> SIGKILL
    stop_signal: int = signal.SIGTERM
    env: dict[str, str] | None = None


@dataclass(slots=True)
class Child:
    """One running incarnation of a ``Spec``."""

    spec: Spec
    proc: subprocess.Popen[bytes]
    log_offset: int
    url: str = ""
    _buffer: bytes = field(default=b"", repr=False)

    @classmethod
    def spawn(cls, spec: Spec) -> Child:
        with open(spec.log, "ab") as err:
            offset = err.tell()
            proc = subprocess.Popen(
                spec.argv,
                bufsize=0,  # read only through its fd (``os.read``): no buffer to strand bytes in
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if spec.announce else err,
                stderr=err,
                start_new_session=True,  # Ctrl-C reaches only the supervisor
                preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
                env=spec.env,
            )
        return cls(spec, proc, offset)

    @property
    def ready(self) -> bool:
        return bool(self.url) or not self.spec.announce

    def last_error(self) -> str:
        return last_line(self.spec.log, self.log_offset) or "(nothing in its log)"

    def poll_ready(self, timeout: float = 0.0) -> bool:
        """Read the announcement if it is there (waiting at most ``timeout``)."""
        if self.ready:
            return True
        out = self.proc.stdout
        assert out is not None
        if _readable(out.fileno(), timeout):
            chunk = os.read(out.fileno(), 4096)
            if not chunk:  # stdout closed: the child is exiting
                return False
            self._buffer += chunk
            line, sep, rest = self._buffer.partition(b"\n")
            if not sep and len(self._buffer) > TAIL_BYTES:
                raise StartError(f"{self.spec.name} printed no address line")
            if sep:
                self._keep(rest)
                text = line.decode(errors="replace")
                if not text.startswith("LISTENING "):
                    raise StartError(f"{self.spec.name} printed {text!r} instead of its address")
                self.url = text.split()[1]
        return self.ready

    def drain(self) -> None:
        """Move what the child printed after its announcement to its log: a pipe nobody
        reads would fill and block the child's next print."""
        out = self.proc.stdout
        if out is None or out.closed or not self.url:
            return
        moved = 0
        while moved < DRAIN_BYTES and _readable(out.fileno(), 0):
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                out.close()
                return
            self._keep(chunk)
            moved += len(chunk)

    def _keep(self, data: bytes) -> None:
        if data:
            with open(self.spec.log, "ab") as log:
                log.write(data)

    def check_start(self, probe: Callable[[], bool] | None = None) -> bool:
        """Whether the child serves yet (its announcement, or ``probe`` for a child that
        announces nothing); ``StartError`` with its last log line if it exited."""
        code = self.proc.poll()
        if code is not None:
            raise exited_at_start(self.spec.name, code, self.spec.log, self.log_offset)
        if self.spec.announce:
            return self.poll_ready()
        return probe is not None and probe()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(self.spec.stop_signal)

    def stop(self) -> None:
        """``stop_signal``, wait up to ``stop_timeout``, then SIGKILL."""
        stop_process(self.proc, grace=self.spec.stop_timeout, sig=self.spec.stop_signal)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass(slots=True)
class _Slot:
    spec: Spec
    backoff: Backoff
    child: Child | None = None
    restart_at: float | None = None
    probe: Callable[[], bool] | None = None
    started_at: float = 0.0


class Supervisor:
    """Children in start order; ``tick`` restarts the ones that died; ``stop`` goes in reverse
    start order, each child fully stopped before the next is asked."""

    def __init__(
        self,
        clock: Clock | None = None,
        settings: BackoffSettings | None = None,
        report: Callable[[str], None] = print,
        start_timeout: float = 30.0,
    ) -> None:
        self.clock: Clock = clock or MonotonicClock()
        self.settings = settings or BackoffSettings()
        self.report = report
        self.start_timeout = start_timeout
        self._slots: list[_Slot] = []

    def add(self, spec: Spec, probe: Callable[[], bool] | None = None) -> Child:
        """Start a child; ``wait_ready`` then waits for it (``probe`` tells when a child that
        announces nothing serves)."""
        slot = _Slot(spec, Backoff(self.clock, self.settings), probe=probe)
        self._slots.append(slot)
        slot.child = Child.spawn(spec)
        slot.backoff.started()
        slot.started_at = self.clock.now()
        return slot.child

    def wait_ready(
        self, timeout: float | None = None, cancelled: Callable[[], bool] = lambda: False
    ) -> None:
        """Until every child serves; ``StartError`` as soon as one exits (with its last log
        line), when ``timeout`` (default ``start_timeout``) has passed or ``cancelled()``."""
        limit = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        waiting = [s for s in self._slots if s.child is not None]
        while waiting:
            waiting = [
                s for s in waiting if s.child is not None and not s.child.check_start(s.probe)
            ]
            if not waiting:
                return
            if cancelled():
                raise StartError("interrupted while starting")
            if time.monotonic() > deadline:
                names = ", ".join(s.spec.name for s in waiting)
                last = waiting[0].child.last_error() if waiting[0].child else ""
                raise StartError(f"{names} did not start within {limit:g} s: {last}")
            time.sleep(0.05)

    def child(self, name: str) -> Child | None:
        return next((s.child for s in self._slots if s.spec.name == name), None)

    def children(self) -> list[Child]:
        return [s.child for s in self._slots if s.child is not None]

    def restarts(self, name: str) -> int:
        return next((s.backoff.restarts for s in self._slots if s.spec.name == name), 0)

    def tick(self) -> list[str]:
        """Notice exits, start what is due; the names of children that may not restart and
        exited (the caller decides whether to stop)."""
        fatal: list[str] = []
        now = self.clock.now()
        for slot in self._slots:
            child = slot.child
            if child is not None:
                code = child.proc.poll()
                if code is None:
                    if not child.ready:
                        self._check_restarted(slot, child, now)
                    else:
                        child.drain()
                    continue
                why = f"{slot.spec.name} exited ({describe_exit(code)}): {child.last_error()}"
                if child.proc.stdout is not None:
                    child.proc.stdout.close()
                slot.child = None
                if not slot.spec.restart:
                    self.report(why)
                    fatal.append(slot.spec.name)
                    continue
                delay = slot.backoff.exited()
                slot.restart_at = now + delay
                self.report(f"{why}; restart {slot.backoff.restarts} in {delay:g} s")
            elif slot.restart_at is not None and now >= slot.restart_at:
                slot.restart_at = None
                try:
                    slot.child = Child.spawn(slot.spec)
                except OSError as exc:
                    delay = slot.backoff.exited()
                    slot.restart_at = now + delay
                    self.report(f"cannot start {slot.spec.name}: {exc}; retry in {delay:g} s")
                    continue
                slot.backoff.started()
                slot.started_at = now
                if not slot.spec.announce:
                    self.report(f"{slot.spec.name} started again (restart {slot.backoff.restarts})")
        return fatal

    def _check_restarted(self, slot: _Slot, child: Child, now: float) -> None:
        """A restarted child that does not announce itself within ``start_timeout`` (or
        announces something else) is killed; the next tick restarts it after its back-off."""
        try:
            if child.poll_ready():
                self.report(
                    f"{slot.spec.name} is serving again at {child.url} "
                    f"(restart {slot.backoff.restarts})"
                )
                return
            if now - slot.started_at <= self.start_timeout:
                return
            why = f"did not serve within {self.start_timeout:g} s"
        except StartError as exc:
            why = str(exc)
        self.report(f"{slot.spec.name}: {why}; killing it")
        child.proc.kill()

    def stop(self) -> None:
        for slot in reversed(self._slots):
            slot.restart_at = None
            if slot.child is not None:
                slot.child.stop()
