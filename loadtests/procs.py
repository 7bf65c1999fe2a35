"""Subprocesses of a run: the slow upstream and the gateway, on 127.0.0.1 ephemeral ports.

Both are started with port 0; the upstream prints ``PORT n`` and the gateway's uvicorn logs
the address it bound, so there is no pick-a-free-port race. Logs go to files in the run's
output folder. Every process is stopped by its own pid (SIGTERM, then SIGKILL after a grace).
Starting and stopping use ``gateway.supervision`` (the same start check and ordered stop as
``apf-gateway up`` and the local container backend).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from gateway.supervision import StartError, StartWatch, stop_process

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
_LISTEN_RE = re.compile(r"running on http://127\.0\.0\.1:(\d+)")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    port: int = 0
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stop(self, grace: float = 25.0) -> int:
        """SIGTERM, wait up to ``grace`` s, then SIGKILL; returns the exit code."""
        code = stop_process(self.popen, grace=grace, kill_wait=5)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def wait_started(
        self, found: Callable[[str], T | None], timeout: float, poll: float, grace: float = 1.0
    ) -> T:
        """Until ``found`` finds something in the log; on an exit or ``timeout``, stop the
        process (``grace``) and raise with the log's last line."""

        def check() -> T | None:
            return found(self.log_path.read_text(errors="replace"))

        watch = StartWatch(self.name, self.popen, self.log_path, check, timeout=timeout)
        try:
            return watch.wait(poll)
        except StartError as exc:
            self.stop(grace)
            raise RuntimeError(f"{exc} (log {self.log_path})") from None


def spawn(name: str, argv: list[str], log_path: Path) -> Proc:
    log = log_path.open("wb")
    popen = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=child_env(),
        cwd=REPO,
    )
    return Proc(name, popen, log_path, _log=log)


def _wait_for_port(proc: Proc, pattern: re.Pattern[str], timeout: float) -> int:
    def port(text: str) -> int | None:
        m = pattern.search(text)
        return int(m.group(1)) if m else None

    return proc.wait_started(port, timeout, 0.05)


def start_upstream(out: Path, service_time: float, list_items: int, list_factor: float) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "loadtests.upstream",
        "--port",
        "0",
        "--service-time",
        str(service_time),
        "--list-items",
        str(list_items),
        "--list-factor",
        str(list_factor),
    ]
    proc = spawn("upstream", argv, out / "upstream.log")
    proc.port = _wait_for_port(proc, re.compile(r"PORT (\d+)"), 15)
    return proc


def start_gateway(name: str, out: Path, config_dir: Path, upstream: str) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "gateway.cli.main",
        "serve",
        "--config",
        str(config_dir),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        upstream,
        "--log-level",
        "info",
    ]
    proc = spawn(name, argv, out / f"{name}.log")
    proc.port = _wait_for_port(proc, _LISTEN_RE, 30)
    wait_ready(proc.url, 15)
    return proc


def wait_ready(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}/readyz never turned 200")
        time.sleep(0.1)


def readyz(url: str) -> int:
    """The /readyz status code (0 when the connection fails)."""
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0
