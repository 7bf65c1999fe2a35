from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

StartRuntime = Callable[..., str]


@pytest.fixture
def start_runtime() -> Iterator[StartRuntime]:
    """Start real ``python -m gateway.runtime`` subprocesses; returns their base URLs."""
    procs: list[tuple[subprocess.Popen[bytes], threading.Thread]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("LISTENING "), line
        # keep the pipe drained: the runtime writes a sentinel line per request
        drain = threading.Thread(target=proc.stdout.read, daemon=True)
        drain.start()
        procs.append((proc, drain))
        return f"http://127.0.0.1:{int(line.split()[1])}"

    yield start
    for proc, drain in procs:
        proc.kill()
        proc.wait()
        drain.join()
        if proc.stdout is not None:
            proc.stdout.close()
