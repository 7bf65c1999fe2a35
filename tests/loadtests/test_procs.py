"""The load-test harness starts and stops its processes with ``gateway.supervision``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from loadtests import procs


def test_a_process_exiting_before_its_port_is_reported_with_its_last_line(
    tmp_path: Path,
) -> None:
    code = "import sys; print('loading'); sys.exit('error: no such scenario')"
    proc = procs.spawn("upstream", [sys.executable, "-c", code], tmp_path / "upstream.log")
    with pytest.raises(RuntimeError) as info:
        procs._wait_for_port(proc, re.compile(r"PORT (\d+)"), 15)
    assert str(info.value) == (
        "upstream exited at start (exit code 1): error: no such scenario "
        f"(log {tmp_path / 'upstream.log'})"
    )


def test_the_port_is_read_from_the_log_and_the_stop_is_graceful(tmp_path: Path) -> None:
    code = "import time; print('PORT 4321', flush=True); time.sleep(60)"
    proc = procs.spawn("upstream", [sys.executable, "-c", code], tmp_path / "upstream.log")
    try:
        assert procs._wait_for_port(proc, re.compile(r"PORT (\d+)"), 15) == 4321
    finally:
        assert proc.stop(5) == -15  # SIGTERM within the grace
