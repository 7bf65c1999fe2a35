"""Process supervision: the back-off policy on a fake clock, the shell on real processes."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gateway.supervision import (
    DRAIN_BYTES,
    Backoff,
    BackoffSettings,
    GracefulStop,
    Spec,
    StartError,
    StartWatch,
    Supervisor,
    describe_exit,
    last_line,
    stop_process,
)
from gateway.testing import FakeEventClock
from tests.support.wait import wait_until


def test_backoff_doubles_up_to_the_cap() -> None:
    clock = FakeEventClock()
    backoff = Backoff(clock, BackoffSettings(0.5, 2.0, 4.0, 60.0))
    delays = []
    for _ in range(6):
        backoff.started()
        clock.advance(1.0)  # crashes after a second: never healthy
        delays.append(backoff.exited())
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.restarts == 6


def test_backoff_resets_after_a_healthy_run() -> None:
    clock = FakeEventClock()
    backoff = Backoff(clock, BackoffSettings(0.5, 2.0, 30.0, 60.0))
    for _ in range(3):
        backoff.started()
        clock.advance(1.0)
        backoff.exited()
    backoff.started()
    clock.advance(59.0)
    assert backoff.exited() == 4.0  # 59 s is not yet healthy
    backoff.started()
    clock.advance(60.0)
    assert backoff.exited() == 0.5  # a full healthy period: back to the start
    assert backoff.restarts == 5


def test_a_long_crash_loop_stays_at_the_cap() -> None:
    clock = FakeEventClock()
    backoff = Backoff(clock, BackoffSettings(0.5, 2.0, 30.0, 60.0))
    for _ in range(5000):  # 2.0 ** 5000 would overflow a float
        backoff.started()
        clock.advance(1.0)
        delay = backoff.exited()
    assert delay == 30.0 and backoff.restarts == 5000


def test_backoff_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        BackoffSettings(initial_seconds=5.0, max_seconds=1.0)
    with pytest.raises(ValueError):
        BackoffSettings(factor=0.5)


def test_last_line_reads_only_what_this_run_wrote(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("old failure\n")
    offset = log.stat().st_size
    assert last_line(log, offset) == ""
    with open(log, "a") as f:
        f.write("starting\nboom: the reason\n\n")
    assert last_line(log, offset) == "boom: the reason"
    with open(log, "a") as f:
        f.write("x" * 10_000 + "\n")
    assert last_line(log, offset) == "x" * 497 + "..."
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(3) == "exit code 3"


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_exiting_at_start_is_reported_at_once_with_its_last_line(tmp_path: Path) -> None:
    supervisor = Supervisor(report=lambda _: None, start_timeout=30)
    supervisor.add(
        Spec(
            "ok",
            _python("import time; print('LISTENING http://x:1', flush=True); time.sleep(60)"),
            tmp_path / "ok.log",
        )
    )
    supervisor.add(
        Spec(
            "bad",
            _python("import sys; print('bad: no such thing', file=sys.stderr); sys.exit(2)"),
            tmp_path / "bad.log",
        )
    )
    started = time.monotonic()
    try:
        with pytest.raises(StartError, match=r"bad exited at start \(exit code 2\): bad: no such"):
            supervisor.wait_ready()
        assert time.monotonic() - started < 5  # not the 30 s start timeout
    finally:
        supervisor.stop()
    assert all(c.proc.poll() is not None for c in supervisor.children())


def test_a_dead_child_is_restarted_with_back_off_and_stops_in_reverse_order(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "order"
    serve = (
        "import signal, sys, time\n"
        "name = sys.argv[1]\n"
        "def bye(*_):\n"
        f"    open({str(marker)!r}, 'a').write(name + '\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('LISTENING http://127.0.0.1:1/' + name, flush=True)\n"
        "print('serving', name, file=sys.stderr, flush=True)\n"
        "time.sleep(60)\n"
    )
    reports: list[str] = []
    settings = BackoffSettings(initial_seconds=0.2, factor=2.0, max_seconds=1.0)
    supervisor = Supervisor(settings=settings, report=reports.append)
    try:
        first = supervisor.add(Spec("a", [*_python(serve), "a"], tmp_path / "a.log"))
        supervisor.add(Spec("b", [*_python(serve), "b"], tmp_path / "b.log"))
        supervisor.wait_ready(30)
        first.proc.kill()
        first.proc.wait()

        def restarted() -> bool:
            supervisor.tick()
            return any("serving again" in r for r in reports)

        wait_until(restarted, 30, "a serving again", interval=0.05)
        assert reports[0] == "a exited (killed by SIGKILL): serving a; restart 1 in 0.2 s"
        assert "a is serving again at http://127.0.0.1:1/a (restart 1)" in reports
        again = supervisor.child("a")
        assert again is not None and again is not first and again.proc.poll() is None
        assert supervisor.restarts("a") == 1 and supervisor.restarts("b") == 0
    finally:
        supervisor.stop()
    assert marker.read_text().split() == ["b", "a"]


CHATTY = (
    "import sys, time\n"
    "print('LISTENING http://127.0.0.1:1/', flush=True)\n"
    "for i in range(2000):\n"
    "    print('line', i, 'x' * 100, flush=True)\n"
    "print('done', file=sys.stderr, flush=True)\n"
    "time.sleep(60)\n"
)


def _all_it_printed_is_logged(log: Path) -> int:
    """A child prints 220 KB after its address (more than a pipe holds), then ``done`` on
    stderr; ``tick`` must move all of it to its log. The number of the pipe it was read from."""
    supervisor = Supervisor(report=lambda _: None)
    try:
        child = supervisor.add(Spec("chatty", _python(CHATTY), log))
        assert child.proc.stdout is not None
        pipe = child.proc.stdout.fileno()
        supervisor.wait_ready(30)

        def logged() -> bool:
            supervisor.tick()
            text = log.read_text()
            return "done" in text and "line 1999 " in text

        wait_until(logged, 30, "all the child printed in its log", interval=0.02)
        return pipe
    finally:
        supervisor.stop()


def test_what_a_child_prints_after_its_address_goes_to_its_log(tmp_path: Path) -> None:
    """Nobody reads a child's stdout after the announcement but the supervisor: unread, a
    full pipe (64 KiB) would block the child's next print."""
    _all_it_printed_is_logged(tmp_path / "c.log")


FLOOD = (
    "import os\n"
    "print('LISTENING http://127.0.0.1:1/', flush=True)\n"
    "while True:\n"
    "    os.write(1, b'x' * 65536)\n"
)


def test_a_child_that_never_stops_printing_does_not_hold_the_tick(tmp_path: Path) -> None:
    """One drain moves at most ``DRAIN_BYTES``: a child printing without pause would keep an
    unbounded drain (and the tick, and every other child's supervision) busy as long as the
    reading keeps up with it (measured without the bound: 10 MB in one drain)."""
    log = tmp_path / "flood.log"
    supervisor = Supervisor(report=lambda _: None)
    try:
        child = supervisor.add(Spec("flood", _python(FLOOD), log))
        supervisor.wait_ready(30)
        drained = threading.Thread(target=child.drain, daemon=True)
        drained.start()
        drained.join(30)  # returns at once when bounded
        assert not drained.is_alive(), "drain did not return while the child kept printing"
        assert 0 < log.stat().st_size <= DRAIN_BYTES + 65536
    finally:
        supervisor.stop()


def test_a_supervisor_with_over_1024_files_open_reads_its_children(tmp_path: Path) -> None:
    """``select`` refuses descriptors from 1024 on (``FD_SETSIZE``): a supervisor holding
    many sockets gets such numbers for its children's pipes and must still read them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1100  # the pipe's read end gets the lowest free number: above the held ones
    assert hard == resource.RLIM_INFINITY or hard >= wanted + 64, f"hard limit {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted + 64), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < wanted:
            held.append(os.open(os.devnull, os.O_RDONLY))
        assert _all_it_printed_is_logged(tmp_path / "c.log") > wanted
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_child_that_may_not_restart_is_reported(tmp_path: Path) -> None:
    reports: list[str] = []
    supervisor = Supervisor(report=reports.append)
    child = supervisor.add(
        Spec(
            "once",
            _python("import sys; sys.exit(3)"),
            tmp_path / "o.log",
            announce=False,
            restart=False,
        ),
        probe=lambda: True,
    )
    child.proc.wait()
    assert supervisor.tick() == ["once"]
    assert reports == ["once exited (exit code 3): (nothing in its log)"]
    supervisor.stop()


def _exited(supervisor: Supervisor, name: str) -> None:
    child = supervisor.child(name)
    assert child is not None
    child.proc.wait(30)


def test_a_crash_loop_slows_down_on_the_supervisors_clock(tmp_path: Path) -> None:
    """Real processes, time on a fake clock: the delays come from the policy, not sleeps."""
    clock = FakeEventClock()
    reports: list[str] = []
    settings = BackoffSettings(initial_seconds=1.0, factor=2.0, max_seconds=4.0)
    supervisor = Supervisor(clock=clock, settings=settings, report=reports.append)
    crash = Spec(
        "crash",
        _python("import sys; print('no database', file=sys.stderr); sys.exit(4)"),
        tmp_path / "c.log",
        announce=False,
    )
    supervisor.add(crash, probe=lambda: True)
    try:
        for delay in (1, 2, 4, 4):
            _exited(supervisor, "crash")
            supervisor.tick()  # notices the exit, schedules the restart
            clock.advance(delay - 0.5)
            supervisor.tick()
            assert supervisor.child("crash") is None  # not yet
            clock.advance(0.5)
            supervisor.tick()  # due: started again
            assert supervisor.child("crash") is not None
    finally:
        supervisor.stop()
    exits = [r for r in reports if "exited" in r]
    assert exits == [
        f"crash exited (exit code 4): no database; restart {n} in {d:g} s"
        for n, d in ((1, 1), (2, 2), (3, 4), (4, 4))
    ]
    assert "crash started again (restart 4)" in reports


def test_a_restarted_child_that_never_serves_is_killed_and_retried(tmp_path: Path) -> None:
    clock = FakeEventClock()
    reports: list[str] = []
    flag = tmp_path / "hang"
    code = (
        "import os, sys, time\n"
        f"if os.path.exists({str(flag)!r}):\n"
        "    time.sleep(60)\n"
        "print('LISTENING http://127.0.0.1:1/', flush=True)\n"
        "time.sleep(60)\n"
    )
    supervisor = Supervisor(clock=clock, report=reports.append, start_timeout=10)
    try:
        first = supervisor.add(Spec("svc", _python(code), tmp_path / "s.log"))
        supervisor.wait_ready(30)
        flag.touch()  # from now on it starts but never serves
        first.proc.kill()
        first.proc.wait()
        supervisor.tick()
        clock.advance(0.5)
        supervisor.tick()  # restarted
        clock.advance(10.5)
        supervisor.tick()  # silent for longer than the start timeout
        assert "svc: did not serve within 10 s; killing it" in reports
        _exited(supervisor, "svc")
        supervisor.tick()
        assert reports[-1].startswith("svc exited (killed by SIGKILL)")
        assert reports[-1].endswith("restart 2 in 1 s")
    finally:
        supervisor.stop()


def test_start_watch_on_the_fake_clock_finds_times_out_or_explains_an_exit(
    tmp_path: Path,
) -> None:
    """The start check the local backend and the load-test harness share with ``up``."""
    log = tmp_path / "child.log"
    log.write_text("warming up\n")
    clock = FakeEventClock()
    found: list[int] = []
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as proc:
        try:
            watch = StartWatch("svc", proc, log, lambda: found[0] if found else None,
                               timeout=5.0, clock=clock)  # fmt: skip
            assert watch.poll() is None
            found.append(8080)
            assert watch.poll() == 8080
            found.clear()
            clock.advance(5.5)  # no wall-clock wait: the deadline is on the injected clock
            with pytest.raises(StartError, match=r"svc did not start within 5 s: warming up"):
                watch.poll()
            assert stop_process(proc, grace=5.0) == -signal.SIGTERM
        finally:
            proc.kill()
    argv = [sys.executable, "-c", "raise SystemExit('no config')"]
    with log.open("ab") as err, subprocess.Popen(argv, stderr=err) as proc:
        proc.wait()
        watch = StartWatch("svc", proc, log, lambda: None, timeout=5.0, clock=clock)
        with pytest.raises(StartError, match=r"svc exited at start \(exit code 1\): no config"):
            watch.poll()


def test_stop_process_kills_what_ignores_its_signal(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        "time.sleep(60)\n"
    )
    with subprocess.Popen([sys.executable, "-c", code, str(ready)]) as proc:
        wait_until(ready.exists, what="the child ignoring SIGTERM")
        assert stop_process(proc, grace=0.2) == -signal.SIGKILL


def test_graceful_stop_on_the_fake_clock_escalates_once_and_spares_a_reused_pid() -> None:
    """The one stop-with-grace of ``stop_process`` and the local backend's ``remove``."""
    clock = FakeEventClock()
    sent: list[int] = []
    running = [True]
    stop = GracefulStop(sent.append, lambda: running[0], grace=5.0, kill_wait=2.0, clock=clock)
    assert sent == [signal.SIGTERM, signal.SIGCONT]  # a paused process must act on it too
    clock.advance(4.9)
    assert not stop.poll() and sent == [signal.SIGTERM, signal.SIGCONT]
    clock.advance(0.1)
    assert not stop.poll() and sent[-1] == signal.SIGKILL
    clock.advance(1.0)
    assert not stop.poll() and sent.count(signal.SIGKILL) == 1  # SIGKILL is sent once
    clock.advance(1.0)
    assert stop.poll() and not stop.gone  # stuck after SIGKILL: given up after kill_wait
    running[0] = False
    assert stop.poll() and stop.gone

    # ``alive`` is asked before every signal: a pid no longer ours is never signalled
    sent.clear()
    assert GracefulStop(sent.append, lambda: False, grace=0.0, clock=clock).poll()
    assert sent == []
    answers = iter([True, False])  # ours at the SIGTERM, someone else's at the deadline
    stop = GracefulStop(sent.append, lambda: next(answers), grace=1.0, clock=clock)
    clock.advance(1.0)
    assert stop.poll() and stop.gone and signal.SIGKILL not in sent


def test_stop_process_lets_a_paused_child_stop_gracefully(tmp_path: Path) -> None:
    """A SIGTERM that a process handles stays pending while it is stopped: without the SIGCONT
    after it, a paused child would sit out the whole grace period and be killed."""
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        "time.sleep(60)\n"  # idles until it is signalled
    )
    with subprocess.Popen([sys.executable, "-c", code, str(ready)]) as proc:
        wait_until(ready.exists, what="the child handling SIGTERM")
        proc.send_signal(signal.SIGSTOP)
        assert stop_process(proc, grace=10.0) == 3
