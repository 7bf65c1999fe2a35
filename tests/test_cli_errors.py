"""One line that says what to do, as ``up`` does: ``serve`` on a taken port (exit 2, nothing
started), and the manager's client subcommands with no manager to talk to (which flags point
them at one). Real processes, a real occupied port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.wait import wait_for

ROOT = Path(__file__).resolve().parent.parent
GATEWAY = [sys.executable, "-m", "gateway"]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APF_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [*GATEWAY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
        check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_serve_on_a_taken_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = cli("serve", "--listen", f"127.0.0.1:{port}", "--upstream", "http://127.0.0.1:1")
    assert done.returncode == 2
    assert done.stderr == (
        f"apf-gateway serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )
    assert done.stdout == ""


def test_serve_on_an_unknown_host_is_one_line_and_exit_2() -> None:
    done = cli("serve", "--listen", "no-such-host.invalid:8080", "--upstream", "http://x:1")
    assert done.returncode == 2
    assert done.stderr.startswith("apf-gateway serve: cannot listen on no-such-host.invalid:8080: ")
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_serve_on_port_0_announces_the_port_it_bound() -> None:
    """The sockets are bound before uvicorn starts; the line uvicorn would log still names the
    port (load tests and users read it), and the server answers there."""
    proc = subprocess.Popen(
        [*GATEWAY, "serve", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(line.rstrip("\n") for line in proc.stderr)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        line = wait_for(
            lambda: next((x for x in lines if "Uvicorn running on http://" in x), None),
            30,
            lambda: f"the address in serve's log: {lines}",
        )
        url = line.split("running on ", 1)[1].split()[0]
        assert not url.endswith(":0")
        assert httpx.get(url + "/livez", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        reader.join(10)
        assert proc.stderr is not None
        proc.stderr.close()
    assert code == 0


@pytest.mark.parametrize(
    "command", [["drain"], ["containers"], ["evict", "c-1"]], ids=lambda c: c[0]
)
def test_manager_clients_without_a_token_say_which_flags_point_at_a_manager(
    tmp_path: Path, command: list[str]
) -> None:
    done = cli("manager", *command, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"apf-gateway manager {command[0]}: cannot read the internal ")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    for flag in ("--manager URL", "--internal-token-file PATH", "APF_INTERNAL_TOKEN"):
        assert flag in done.stderr


def test_manager_client_with_no_manager_listening_says_which_flag(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t" * 40)
    token.chmod(0o600)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connections are refused
        done = cli(
            "manager", "drain", "--manager", f"http://127.0.0.1:{port}",
            "--internal-token-file", str(token),
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"apf-gateway manager drain: cannot reach the manager at http://127.0.0.1:{port}/v1/drain"
    )
    assert "is it running? --manager URL" in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
