from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

StartRuntime = Callable[..., str]


@pytest.fixture
def start_runtime() -> Iterator[StartRuntime]:
    """Start real ``python -m gateway.runtime`` subprocesses; returns their base URLs."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("LISTENING "), line
        return f"http://127.0.0.1:{int(line.split()[1])}"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
