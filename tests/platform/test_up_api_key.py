"""``apf-gateway up``'s API key without argv: ``--api-key-file`` (0600), ``$APF_GATEWAY_API_KEY``;
``--api-key`` still works and warns that every local user can read it. Real ``up`` processes,
real requests through the front door."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from gateway.cli.up import API_KEY_ENV, CMDLINE_WARNING, DEFAULT_API_KEY
from tests.support.wait import wait_for

KEY = "0b6cfa47-41a8-4f7d-9c4e-2f2b1a7d1c01:sEcReT0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH"
WARNING = f"apf-gateway up: {CMDLINE_WARNING}"


class Up:
    """``up`` on a free port with one router and no stem cell; stdout and stderr apart."""

    def __init__(self, state: Path, *args: str, env: dict[str, str] | None = None) -> None:
        argv = [sys.executable, "-m", "gateway", "up", "--listen", "127.0.0.1:0"]
        argv += ["--state-dir", str(state), "--routers", "1", "--prewarm", "", *args]
        self.stderr = state.parent / f"{state.name}.stderr"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                env={k: v for k, v in os.environ.items() if k != API_KEY_ENV} | (env or {}),
            )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.url = self._wait("apf-gateway is up: ").split(": ", 1)[1]
        self.banner = self._wait("  logs: ") and list(self.lines)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _wait(self, text: str) -> str:
        def found() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"up exited: {self.lines} {self.stderr.read_text()}")
            return next((line for line in self.lines if line.startswith(text)), None)

        return wait_for(found, 60, f"{text!r} from up", 0.05)

    def status(self, key: str) -> int:
        auth = tuple(key.split(":", 1))
        return httpx.get(self.url + "/api/v1/namespaces", auth=auth, timeout=30).status_code

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=90)
        self.reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert code == 0, self.lines
        return self.stderr.read_text()


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "api-key"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("source", ["file", "environment"])
def test_the_key_from_a_file_or_the_environment_is_the_one_accepted(
    tmp_path: Path, source: str
) -> None:
    if source == "file":
        up = Up(tmp_path / "s", "--api-key-file", str(key_file(tmp_path, KEY)))
    else:
        up = Up(tmp_path / "s", env={API_KEY_ENV: KEY})
    try:
        assert up.status(KEY) == 200
        assert up.status(DEFAULT_API_KEY) == 401
        assert not any(KEY.split(":")[1] in line for line in up.banner), up.banner  # not echoed
    finally:
        stderr = up.stop()
    assert "warning" not in stderr


def test_a_key_on_the_command_line_works_and_warns(tmp_path: Path) -> None:
    up = Up(tmp_path / "s", "--api-key", KEY)
    try:
        assert up.status(KEY) == 200
    finally:
        stderr = up.stop()
    assert stderr.splitlines()[0] == WARNING
    assert "--api-key-file" in WARNING and API_KEY_ENV in WARNING


def run_up(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "up", "--state-dir", str(tmp_path / "s"), *args],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != API_KEY_ENV} | (env or {}),
    )  # fmt: skip
    assert "apf-gateway is up" not in done.stdout
    return done.returncode, done.stderr


def test_a_bad_key_source_is_one_line_and_exit_2(tmp_path: Path) -> None:
    shared = key_file(tmp_path, KEY, 0o644)
    cases = [
        (["--api-key-file", str(shared)], {}, f"{shared} is readable by others (mode 644)"),
        (["--api-key-file", str(tmp_path / "none")], {}, "No such file or directory"),
        ([], {API_KEY_ENV: "nokey"}, f"${API_KEY_ENV} must be UUID:KEY"),
        (["--api-key", "a:b c"], {}, "--api-key must be UUID:KEY"),
    ]
    for args, env, message in cases:
        code, err = run_up(tmp_path, *args, env=env)
        assert code == 2 and err.startswith("apf-gateway up: "), (args, err)
        assert message in err and len(err.splitlines()) == 1, (args, err)
    code, err = run_up(tmp_path, "--api-key", KEY, "--api-key-file", str(shared))
    assert code == 2 and "not allowed with argument" in err
