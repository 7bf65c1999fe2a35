#!/usr/bin/env python3
"""The first five minutes, checked: the README's "Run it" install in a fresh venv (no extras),
``apf-gateway up`` on a free port, docs/quickstart.md's steps, then Ctrl-C and nothing left.

    python3 scripts/smoke_quickstart.py            # a temporary venv, removed afterwards
    python3 scripts/smoke_quickstart.py --keep     # keep it (the path is printed)

The install is the README's command itself, read from README.md with ``.venv`` replaced by a
venv in a temporary folder (never the checkout's ``.venv``, whose dev extras would hide a
missing dependency); the action, its invocations and the API key are read from
docs/quickstart.md, so the smoke fails when either document no longer works. ``.ci/run`` runs it
before the tests. Standard library only: it runs before anything is installed. Exit code 0 when
every step passed, 1 with the step that failed and the logs' last lines otherwise.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT = 600.0  # pip resolving and building on a slow machine
UP_TIMEOUT = 90.0  # front door, routers, manager and the prewarmed stem cell
INVOKE_TIMEOUT = 60.0  # a cold start included
STOP_TIMEOUT = 90.0  # routers finish their activations, the manager removes containers


class SmokeError(Exception):
    """A step failed; the message says which and what was seen."""


def step(message: str) -> None:
    print(f"smoke: {message}", flush=True)


def readme_command() -> tuple[str, str]:
    """The README's "Run it" command, split into its install part and the ``up`` command."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"## Run it[^\n]*\n+```bash\n(.+?)\n```", text, re.S)
    if not match:
        raise SmokeError("README.md: no ```bash block under '## Run it'")
    command = match.group(1).strip()
    install, sep, up = command.rpartition(" && ")
    if not sep or up != ".venv/bin/apf-gateway up" or ".venv" not in install:
        raise SmokeError(
            f"README.md: 'Run it' is not '<install> && .venv/bin/apf-gateway up': {command}"
        )
    return install, up


def quickstart() -> tuple[str, dict[str, Any]]:
    """The API key and the action that docs/quickstart.md creates."""
    text = (ROOT / "docs" / "quickstart.md").read_text()
    key = re.search(r"^KEY=(\S+)$", text, re.M)
    body = re.search(r"actions/hello\?overwrite=true\".*?-d '(.+?)'", text, re.S)
    if not key or not body:
        raise SmokeError("docs/quickstart.md: no KEY=... line or no create (PUT) of 'hello'")
    return key.group(1), json.loads(body.group(1))


def install(venv: Path, command: str, log: Path) -> None:
    """Run the README's install with its ``.venv`` at ``venv``, in the checkout."""
    command = command.replace(".venv", shlex.quote(str(venv)))
    step(f"install: {command}")
    with log.open("wb") as out:
        done = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT, check=False,
        )  # fmt: skip
    if done.returncode:
        raise SmokeError(f"the README's install failed (exit {done.returncode}): {tail(log)}")


class Up:
    """``apf-gateway up`` on a free port in ``work`` (its default state dir lands there), its
    stdout read by a thread (the banner, then "apf-gateway stopped")."""

    def __init__(self, venv: Path, work: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("APF_")}
        argv = [str(venv / "bin" / "apf-gateway"), "up", "--listen", "127.0.0.1:0"]
        step(f"start: {' '.join(argv)} (in {work})")
        with (work / "up.stderr").open("wb") as stderr:
            self.proc = subprocess.Popen(
                argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=stderr, text=True,
            )  # fmt: skip
        self.lines: list[str] = []
        self.banner = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.family: dict[int, str] = {}  # every descendant ever seen: pid -> start time
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        """Record up's descendants until it exits: a container started late or a child that
        lost its parent is still checked at the end."""
        while self.proc.poll() is None:
            self.family.update(descendants(self.proc.pid))
            time.sleep(0.2)  # a sampling interval, not a wait for a condition

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("  logs: "):  # the last line of its banner
                self.banner.set()

    def url(self) -> str:
        if not self.banner.wait(UP_TIMEOUT):
            raise SmokeError(f"'up' did not print its banner within {UP_TIMEOUT:g} s: {self.lines}")
        first = next(x for x in self.lines if x.startswith("apf-gateway is up: "))
        return first.split(": ", 1)[1].strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def call(url: str, key: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    user, _, password = key.partition(":")
    request = urllib.request.Request(url, method=method)
    token = f"{user}:{password}".encode()
    request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, data=data, timeout=INVOKE_TIMEOUT) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def expect(what: str, got: tuple[int, Any], status: int) -> Any:
    if got[0] != status:
        raise SmokeError(f"{what}: expected {status}, got {got[0]}: {got[1]}")
    step(f"ok: {what}: {json.dumps(got[1])[:160]}")
    return got[1]


def run_quickstart(api: str, key: str, action: dict[str, Any]) -> None:
    base = f"{api}/api/v1/namespaces/_"
    expect("create", call(f"{base}/actions/hello?overwrite=true", key, "PUT", action), 200)
    result = expect(
        "blocking invoke, result only",
        call(f"{base}/actions/hello?blocking=true&result=true", key, "POST", {"name": "Ada"}),
        200,
    )
    if result != {"greeting": "Hello Ada"}:
        raise SmokeError(f"blocking invoke: expected Hello Ada, got {result}")
    accepted = expect(
        "non-blocking invoke", call(f"{base}/actions/hello", key, "POST", {"name": "Bob"}), 202
    )
    aid = accepted["activationId"]
    deadline = time.monotonic() + INVOKE_TIMEOUT
    while (got := call(f"{base}/activations/{aid}", key))[0] == 404:
        if time.monotonic() > deadline:
            raise SmokeError(f"activation {aid}: no record after {INVOKE_TIMEOUT:g} s")
        time.sleep(0.2)  # the activation runs in the background: poll for its record
    record = expect("its record", got, 200)
    if record["response"]["result"] != {"greeting": "Hello Bob"}:
        raise SmokeError(f"activation {aid}: unexpected record {record}")
    response = expect("its result", call(f"{base}/activations/{aid}/result", key), 200)
    if response.get("result") != {"greeting": "Hello Bob"} or not response.get("success"):
        raise SmokeError(f"activation {aid}: unexpected result {response}")
    logs = expect("its logs", call(f"{base}/activations/{aid}/logs", key), 200)["logs"]
    if not any(line.endswith("called") for line in logs):
        raise SmokeError(f"activation {aid}: 'called' not in its logs {logs}")
    expect("delete", call(f"{base}/actions/hello", key, "DELETE"), 200)


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process, '' start time for zombies."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            found[int(entry.name)] = (int(fields[1]), "" if fields[0] == "Z" else fields[19])
    return found


def descendants(pid: int) -> dict[int, str]:
    """The living descendants of ``pid``: pid -> start time (against pid reuse)."""
    table = processes()
    out: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, started) in table.items():
            if ppid == parent and started:
                out[child] = started
                todo.append(child)
    return out


def using(work: Path) -> list[int]:
    """Living processes whose command line or working directory is inside ``work``."""
    found = []
    mine = os.getpid()
    for pid, (_, started) in processes().items():
        if pid == mine or not started:
            continue
        try:
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if str(work).encode() in argv or cwd == str(work) or cwd.startswith(f"{work}/"):
            found.append(pid)
    return found


def stop(up: Up, work: Path) -> None:
    """Ctrl-C (SIGINT), as the quickstart says; then nothing of it may be left running."""
    running = descendants(up.proc.pid)
    step(f"stop: SIGINT to 'up' (pid {up.proc.pid}, {len(running)} descendants running)")
    up.proc.send_signal(signal.SIGINT)
    try:
        code = up.proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SmokeError(f"'up' did not stop within {STOP_TIMEOUT:g} s of SIGINT") from None
    up.reader.join(10.0)
    up.watcher.join(10.0)
    children = {**up.family, **running}
    if code != 0 or "apf-gateway stopped" not in up.lines:
        raise SmokeError(f"'up' stopped with exit code {code}: {up.lines}")
    deadline = time.monotonic() + 10.0
    while True:
        table = processes()
        left = sorted(p for p, t in children.items() if p in table and table[p][1] == t)
        left += [p for p in using(work) if p not in left]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # a killed runtime process is reaped by its new parent: poll
    if left:
        names = [(Path("/proc") / str(p) / "cmdline").read_bytes()[:120] for p in left]
        raise SmokeError(f"still running after 'up' stopped: {left} {names}")
    step(f"ok: 'up' exited 0; none of the {len(children)} processes it started is left running")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n  ".join(["", *path.read_text(errors="replace").splitlines()[-lines:]])
    except OSError:
        return f"(no {path})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary venv and logs")
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="apf-smoke-")).resolve()
    venv, work = top / "venv", top / "work"
    work.mkdir()
    up: Up | None = None
    try:
        install_command, _ = readme_command()
        key, action = quickstart()
        install(venv, install_command, top / "install.log")
        up = Up(venv, work)
        api = up.url()
        if f"  API key (namespace guest): {key}" not in up.lines:
            raise SmokeError(f"'up' printed no key or not docs/quickstart.md's: {up.lines}")
        step(f"up: {api}")
        run_quickstart(api, key, action)
        stop(up, work)
    except (SmokeError, OSError, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
        print(f"smoke: FAILED: {exc}", file=sys.stderr)
        print(f"smoke: up's stderr:{tail(work / 'up.stderr')}", file=sys.stderr)
        for log in sorted((work / ".apf-gateway" / "logs").glob("*.log")):
            print(f"smoke: {log.name}:{tail(log, 8)}", file=sys.stderr)
        if up is not None:
            up.kill()
        return 1
    finally:
        if args.keep:
            step(f"kept {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    step("PASSED: the README's install and docs/quickstart.md work on a plain install")
    return 0


if __name__ == "__main__":
    sys.exit(main())
