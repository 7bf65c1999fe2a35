"""``apf-gateway up``'s API key without argv: ``--api-key-file`` (0600), ``$APF_GATEWAY_API_KEY``;
``--api-key`` still works and warns that every local user can read it. Real ``up`` processes,
real requests through the front door."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_platform_up import Up as UpBase

from gateway.cli.up import API_KEY_ENV, CMDLINE_WARNING, DEFAULT_API_KEY

KEY = "0b6cfa47-41a8-4f7d-9c4e-2f2b1a7d1c01:sEcReT0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH"
WARNING = f"apf-gateway up: {CMDLINE_WARNING}"


class Up(UpBase):
    """``up`` with one router and no stem cell, its standard error in a file of its own, the
    key variable only as the test gives it."""

    def __init__(self, state: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.stderr = state.parent / f"{state.name}.stderr"
        clean = {k: v for k, v in os.environ.items() if k != API_KEY_ENV} | (env or {})
        super().__init__(state, "--prewarm", "", *args, routers=1, stderr=self.stderr, env=clean)
        self.wait_for("  logs: ")
        self.banner = list(self.lines)

    def status(self, key: str) -> int:
        auth = tuple(key.split(":", 1))
        return httpx.get(self.url + "/api/v1/namespaces", auth=auth, timeout=30).status_code

    def stopped_stderr(self) -> str:
        """Stop up (exit 0) and give what it wrote to standard error."""
        assert self.stop() == 0, self.lines
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
        stderr = up.stopped_stderr()
    assert "warning" not in stderr


def test_a_key_on_the_command_line_works_and_warns(tmp_path: Path) -> None:
    up = Up(tmp_path / "s", "--api-key", KEY)
    try:
        assert up.status(KEY) == 200
    finally:
        stderr = up.stopped_stderr()
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
