"""``apf-gateway up``: front door + N routers + manager (local processes) on this machine.

Layout: the front door (``apf-gateway serve``) authenticates OpenWhisk API keys and forwards
identity to one upstream port that all routers share (SO_REUSEPORT: the kernel spreads
connections over them, no extra hop); each router also has a private port for the manager and
its peers. Children run in their own sessions so that Ctrl-C reaches only this process, which
stops them in order: front door, routers (they flush activation records and give back their
containers), manager (it removes every container). Children also get SIGTERM if this process
dies (``PR_SET_PDEATHSIG``), and a final sweep kills any runtime process still recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gateway.cli.router import add_blocking_wait

#: The well-known local key of OpenWhisk's standalone mode (namespace ``guest``).
DEFAULT_API_KEY = (
    "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:"
    "123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
)
#: How much longer than the blocking wait the front door waits for a router's answer.
BLOCKING_MARGIN = 10.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("up", help="run front door + routers + manager locally")
    parser.add_argument(
        "--listen", default="127.0.0.1:3233", help="front door HOST:PORT (default 127.0.0.1:3233)"
    )
    parser.add_argument("--routers", type=int, default=2, help="number of routers (default 2)")
    parser.add_argument(
        "--state-dir",
        default=".apf-gateway",
        help="store, keys, containers, logs (default .apf-gateway)",
    )
    parser.add_argument(
        "--api-key",
        default=DEFAULT_API_KEY,
        help="UUID:KEY for namespace guest (default: the well-known OpenWhisk standalone key)",
    )
    parser.add_argument(
        "--prewarm",
        default="python:3=1",
        help="stem cells KIND=N, '' for none (default python:3=1)",
    )
    parser.add_argument(
        "--quota", type=int, default=100, help="containers per namespace (default 100)"
    )
    parser.add_argument(
        "--config",
        action="extend",
        nargs="+",
        default=[],
        metavar="PATH",
        help="front-door configuration (FlowSchemas, PriorityLevelConfigurations, a "
        "GatewayConfiguration), passed to 'apf-gateway serve --config'; reloaded on change",
    )
    add_blocking_wait(parser, "passed to the routers")
    parser.add_argument(
        "--upstream-read-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the front door's proxy.readTimeout; must exceed --max-blocking-wait "
        f"(default: --max-blocking-wait + {BLOCKING_MARGIN:g})",
    )
    parser.set_defaults(func=_up)


def read_timeout_for(max_blocking_wait: float, given: float | None) -> float:
    """The front door's upstream read timeout: longer than any blocking invoke may stay
    silent, so that the router's 202 arrives before the proxy gives up with 504."""
    if max_blocking_wait <= 0:
        raise ValueError(f"--max-blocking-wait must be positive, got {max_blocking_wait:g}")
    if given is None:
        return max_blocking_wait + BLOCKING_MARGIN
    if given <= max_blocking_wait:
        raise ValueError(
            f"--upstream-read-timeout ({given:g}s) must be longer than --max-blocking-wait "
            f"({max_blocking_wait:g}s), or the front door cuts blocking invokes with 504"
        )
    return given


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Child:
    def __init__(self, name: str, argv: list[str], log: Path, announce: bool = True) -> None:
        self.name = name
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if announce else err,
                stderr=err,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only
            )
        self.url = ""
        if announce:
            assert self.proc.stdout is not None
            ready, _, _ = select.select([self.proc.stdout], [], [], 20)
            line = self.proc.stdout.readline().decode() if ready else ""
            if not line.startswith("LISTENING "):
                raise RuntimeError(f"{name} did not start; see {log}")
            self.url = line.split()[1]

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _wait_http(host: str, port: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return True
        time.sleep(0.05)
    return False


def _sweep(state: Path) -> None:
    """Kill any runtime process group still recorded (the manager normally removed them)."""
    for record in (state / "containers").glob("*/container.json"):
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(json.loads(record.read_text())["pid"]), signal.SIGKILL)


def _internal_token(root: Path) -> Path:
    """A fresh internal token for this run (manager and routers require it of each other);
    the state dir and the file are this user's only (0700 / 0600)."""
    from gateway.platform.internal_token import write

    root.chmod(0o700)
    path = root / "internal-token"
    write(path)
    return path


def _up(args: argparse.Namespace) -> int:
    from gateway.platform.serving import bind, parse_listen

    uuid, sep, key = args.api_key.partition(":")
    if not sep or not uuid or not key:
        print("--api-key must be UUID:KEY", file=sys.stderr)
        return 2
    if args.routers < 1:
        print("--routers must be >= 1", file=sys.stderr)
        return 2
    try:
        host, port = parse_listen(args.listen, 3233)
        read_timeout = read_timeout_for(args.max_blocking_wait, args.upstream_read_timeout)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    root = Path(args.state_dir).resolve()
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    token = ["--internal-token-file", str(_internal_token(root))]
    keys = root / "openwhisk-keys"
    keys.write_text(f"{uuid}:{key},guest,guest\n")
    keys.chmod(0o600)
    py = [sys.executable, "-m", "gateway"]
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    children: list[Child] = []
    shared = bind("127.0.0.1", 0, reuse_port=True)  # holds the shared port until routers bind
    shared_port = shared.getsockname()[1]
    try:
        manager_args = ["manager", "serve", "--listen", "127.0.0.1:0", *token]
        manager_args += ["--state-dir", str(root / "state"), "--quota", str(args.quota)]
        if args.prewarm:
            manager_args += ["--prewarm", args.prewarm]
        manager = Child("manager", py + manager_args, logs / "manager.log")
        children.append(manager)
        for i in range(1, args.routers + 1):
            router_args = ["router", "--listen", "127.0.0.1:0", "--id", f"router-{i}", *token]
            router_args += ["--shared-listen", f"127.0.0.1:{shared_port}"]
            router_args += [
                "--manager",
                manager.url,
                "--store",
                f"sqlite:///{root / 'platform.db'}",
                "--max-blocking-wait",
                str(args.max_blocking_wait),
            ]
            children.append(Child(f"router-{i}", py + router_args, logs / f"router-{i}.log"))
        shared.close()
        front_args = ["serve", "--listen", f"{host}:{port}"]
        # Only the OpenWhisk API goes to the routers (not their /_platform/ endpoints, which
        # trust loopback callers), and the front door answers errors there in its shape.
        front_args += ["--upstream", f"/api/v1=http://127.0.0.1:{shared_port}"]
        front_args += ["--upstream-error-format", "/api/v1=openwhisk"]
        front_args += ["--openwhisk-keys-file", str(keys), "--anonymous-auth", "false"]
        front_args += ["--upstream-read-timeout", str(read_timeout)]
        if args.config:
            front_args += ["--config", *(str(Path(p).resolve()) for p in args.config)]
        front = Child("front door", py + front_args, logs / "front-door.log", announce=False)
        children.append(front)
        if not _wait_http(host, port) or front.proc.poll() is not None:
            raise RuntimeError(f"the front door did not start; see {front.log}")
        api = f"http://{host}:{port}"
        print(f"apf-gateway is up: {api}", flush=True)
        print(f"  API key (namespace guest): {args.api_key}")
        print(f"  try: curl -u '{args.api_key}' {api}/api/v1/namespaces/_/actions")
        print(f"  manager: {manager.url}   routers: {' '.join(c.url for c in children[1:-1])}")
        print(f"  logs: {logs}   (Ctrl-C stops everything)", flush=True)
        while not stop["now"]:
            if any(c.proc.poll() is not None for c in children):
                dead = [c.name for c in children if c.proc.poll() is not None]
                print(f"stopping: {', '.join(dead)} exited (see {logs})", file=sys.stderr)
                return_code = 1
                break
            time.sleep(0.2)
        else:
            return_code = 0
    except RuntimeError as exc:
        print(f"apf-gateway up: {exc}", file=sys.stderr)
        return_code = 1
    finally:
        shared.close()
        for child in reversed(children):  # front door, routers, then the manager
            child.stop()
        _sweep(root / "state")
    print("apf-gateway stopped", flush=True)
    return return_code
