"""Suite-wide scheduling for pytest-xdist (issue 20 item 7: the suite within 7 minutes on two
cores). Most tests wait on sockets and subprocesses, so more workers than cores pays.

- The compiled-build test is the longest by far: it goes first, so it never becomes the tail.
- A test marked ``alone`` asserts a latency (a router's ``/livez`` while it takes a large
  body): it runs while no other test runs, as it would in a serial run. It shares the compiled
  build's worker (so it never overlaps that test, which takes no lock) and, through two file
  locks, waits for the other workers' running tests to end while holding their next ones back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The one test that takes minutes (tests/test_compiled_build.py): started first.
FIRST = "test_compiled_build_passes_the_admission_tests"
GROUP = "compiled-build-then-alone"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may use, plus one (measured on two cores:
    three workers 274 s, serial 544 s; the workers mostly wait)."""
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.name != FIRST)  # stable: the rest keep their order
    for item in items:
        if item.name == FIRST or item.get_closest_marker("alone") is not None:
            item.add_marker(pytest.mark.xdist_group(GROUP))


@contextlib.contextmanager
def _machine(locks: Path, alone: bool) -> Iterator[None]:
    """Writer-preferring shared/exclusive lock across the workers: every test passes the
    turnstile and holds the room shared; an ``alone`` test holds the turnstile (no new test
    starts) until it has the room to itself (the running ones have ended)."""
    with (locks / "turnstile").open("a") as turnstile, (locks / "room").open("a") as room:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield  # closing the files releases what is held


@pytest.fixture(autouse=True)
def _share_the_machine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    if "PYTEST_XDIST_WORKER" not in os.environ or request.node.name == FIRST:
        yield  # a serial run; or the compiled build, which never overlaps an alone test
        return
    locks = tmp_path_factory.getbasetemp().parent  # shared by this run's workers
    with _machine(locks, request.node.get_closest_marker("alone") is not None):
        yield
