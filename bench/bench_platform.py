"""Platform benchmark: warm invoke overhead, cold starts, pause/resume. Run by hand:

    .venv/bin/python bench/bench_platform.py [--rounds 5] [--requests 300] [--colds 10]

Everything runs on 127.0.0.1 as real processes (manager, router, front door, runtimes);
the client is one sequential aiohttp session, so latencies are per request with no queueing.

1. Warm invoke, interleaved request by request (A B C A B C ...), p50 per round: the
   runtime's ``/run`` called directly (a separate, initialized runtime process), the same
   action through a router, and through front door + router.
   Added p50 = p50(variant) - p50(direct) in the same round. With ``--baseline-tree PATH``
   (a checkout of another commit, e.g. ``git worktree add /tmp/base main``) the same three
   paths of that tree run interleaved too, so a change (the container secret, the sandbox)
   is measured against its baseline in one run.
2. Cold start (create + init + first run, client-observed, blocking invoke of a new action):
   a manager without stem cells vs one with ``--prewarm python:3=1``, interleaved.
3. Pause/resume: SIGSTOP+SIGCONT of a runtime process group (what the router does), and a
   warm invoke of a paused container vs a running one through the router.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import secrets
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from gateway.manager.backends.base import ContainerSpec
from gateway.manager.backends.local import LocalProcessBackend

IDENTITY = {"X-Remote-User": "bench", "X-Remote-Extra-Namespace": "guest"}


def identity() -> dict[str, str]:
    """What the front door sends a router: routers read the identity only with the token."""
    return {**IDENTITY, "Authorization": f"Bearer {os.environ['APF_INTERNAL_TOKEN']}"}


KEY = "b3nch000-0000-0000-0000-000000000000:benchkey"
NOOP = "def main(args):\n    return {'ok': True}\n"
BASELINE = "baseline: "


def tree_env(tree: str | None) -> dict[str, str] | None:
    """Children import ``gateway`` from ``tree`` (PYTHONPATH precedes the editable install)."""
    return None if tree is None else {**os.environ, "PYTHONPATH": tree}


def start(
    args: list[str], log: Path, announce: bool = True, tree: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", *args],
            stdout=subprocess.PIPE if announce else err,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=tree_env(tree),
        )
    url = ""
    if announce:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        line = proc.stdout.readline().decode() if ready else ""
        if not line.startswith("LISTENING"):
            raise SystemExit(f"{args[0]} did not start, see {log}")
        url = line.split()[1]
    return proc, url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


async def timed(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> float:
    t0 = time.perf_counter()
    async with session.request(method, url, **kw) as resp:
        await resp.read()
        if resp.status not in (200, 202):
            raise SystemExit(f"{url}: {resp.status} {await resp.text()}")
    return (time.perf_counter() - t0) * 1000


class Platform:
    def __init__(
        self,
        root: Path,
        name: str,
        *manager_args: str,
        front: bool = False,
        tree: str | None = None,
    ) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        state = root / name
        state.mkdir()
        proc, self.manager = start(
            [
                "manager",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--state-dir",
                str(state / "s"),
                *manager_args,
            ],
            state / "manager.log",
            tree=tree,
        )
        self.procs.append(proc)
        proc, self.router = start(
            [
                "router",
                "--listen",
                "127.0.0.1:0",
                "--manager",
                self.manager,
                "--store",
                f"sqlite:///{state / 'db.sqlite'}",
                "--id",
                name,
                "--pause-grace",
                "600",
            ],
            state / "router.log",
            tree=tree,
        )
        self.procs.append(proc)
        self.front = ""
        if front:
            keys = state / "keys"
            keys.write_text(f"{KEY},bench,guest\n")
            port = free_port()
            token: list[str] = []
            if tree is None:  # a baseline tree may predate it (its routers trust loopback)
                path = state / "internal-token"
                path.write_text(os.environ["APF_INTERNAL_TOKEN"])
                path.chmod(0o600)
                token = ["--upstream-token-file", f"/={path}"]
            proc, _ = start(
                [
                    "serve",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--upstream",
                    self.router,
                    "--openwhisk-keys-file",
                    str(keys),
                    "--anonymous-auth",
                    "false",
                    "--log-level",
                    "warning",
                    *token,
                ],
                state / "front.log",
                announce=False,
                tree=tree,
            )
            self.procs.append(proc)
            self.front = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)

    def action(self, name: str, base: str | None = None) -> str:
        return f"{base or self.router}/api/v1/namespaces/_/actions/{name}"

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()


def plain_runtime(tree: str | None, secret: str = "") -> tuple[subprocess.Popen[bytes], str]:
    """A runtime of ``tree`` started as the backend did before the sandbox (this interpreter,
    no launcher); with ``secret`` it requires it."""
    env = tree_env(tree) or dict(os.environ)
    if secret:
        env["APF_CONTAINER_SECRET"] = secret
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().decode().split()[1]
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # sentinel lines
    return proc, f"http://127.0.0.1:{port}"


async def warm(args: argparse.Namespace, root: Path) -> list[str]:
    platform = Platform(root, "warm", front=True)
    backend = LocalProcessBackend(root / "direct")
    direct = await backend.create(ContainerSpec("c-direct", "python:3", 256, 1))
    basic = {"Authorization": "Basic " + base64.b64encode(KEY.encode()).decode()}
    secret = {"headers": {"Authorization": f"Bearer {direct.secret}"}}
    base_platform: Platform | None = None
    base_runtime: subprocess.Popen[bytes] | None = None
    extra: list[subprocess.Popen[bytes]] = []
    try:
        async with aiohttp.ClientSession(headers=identity()) as s:
            init = {"value": {"code": NOOP}}
            await timed(s, "POST", direct.url + "/init", json=init, **secret)
            variants: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
                "direct runtime /run": (direct.url + "/run", {"value": {}}, secret),
            }
            trees: list[tuple[str, Platform]] = [("", platform)]
            if args.baseline_tree:
                base_platform = Platform(root, "warm-base", front=True, tree=args.baseline_tree)
                base_runtime, base_url = plain_runtime(args.baseline_tree)
                await timed(s, "POST", base_url + "/init", json=init)
                plain, plain_url = plain_runtime(None, direct.secret)
                extra.append(plain)
                await timed(s, "POST", plain_url + "/init", json=init, **secret)
                variants["direct runtime /run, no sandbox (secret only)"] = (
                    plain_url + "/run",
                    {"value": {}},
                    secret,
                )
                variants[BASELINE + "direct runtime /run"] = (base_url + "/run", {"value": {}}, {})
                trees.append((BASELINE, base_platform))
            for prefix, p in trees:
                await timed(
                    s,
                    "PUT",
                    p.action("noop") + "?overwrite=true",
                    json={"exec": {"kind": "python:3", "code": NOOP}},
                )
                variants[prefix + "router"] = (
                    p.action("noop") + "?blocking=true&result=true",
                    {},
                    {},
                )
                variants[prefix + "front door + router"] = (
                    p.action("noop", p.front) + "?blocking=true&result=true",
                    {},
                    {"headers": basic},
                )
            for url, body, kw in variants.values():  # warm up every path
                for _ in range(50):
                    await timed(s, "POST", url, json=body, **kw)
            results: dict[str, list[float]] = {k: [] for k in variants}
            added: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(args.rounds):
                samples: dict[str, list[float]] = {k: [] for k in variants}
                for _ in range(args.requests):  # interleaved request by request: A B C A B C
                    for name, (url, body, kw) in variants.items():
                        samples[name].append(await timed(s, "POST", url, json=body, **kw))
                for name, xs in samples.items():
                    direct_name = "direct runtime /run"
                    if name.startswith(BASELINE):
                        direct_name = BASELINE + direct_name
                    results[name].append(p50(xs))
                    added[name].append(p50(xs) - p50(samples[direct_name]))
    finally:
        await backend.remove(direct, 0)
        platform.stop()
        if base_platform is not None:
            base_platform.stop()
        for proc in [*extra, *([base_runtime] if base_runtime is not None else [])]:
            proc.kill()
            proc.wait()
    lines = [
        "| path | p50 ms, median of rounds (min-max) | added p50 vs direct, ms |",
        "|---|---|---|",
    ]
    for name, values in results.items():
        lines.append(f"| {name} | {fmt(values)} | {fmt(added[name])} |")
    if args.baseline_tree:
        lines += ["", "| path | p50 ratio this tree / baseline, median of rounds (min-max) |"]
        lines.append("|---|---|")
        pairs = ["direct runtime /run", "router", "front door + router"]
        for name in pairs:
            ratios = [a / b for a, b in zip(results[name], results[BASELINE + name], strict=True)]
            lines.append(f"| {name} | {fmt(ratios)} |")
        plain = results["direct runtime /run, no sandbox (secret only)"]
        ratios = [a / b for a, b in zip(plain, results[BASELINE + pairs[0]], strict=True)]
        lines.append(f"| direct runtime /run, no sandbox (secret only) | {fmt(ratios)} |")
    return lines


async def cold(args: argparse.Namespace, root: Path) -> list[str]:
    plain = Platform(root, "cold")
    stem = Platform(root, "stem", "--prewarm", "python:3=1")
    platforms = {"cold (no stem cell)": plain, "cold from a stem cell": stem}
    if args.baseline_tree:
        platforms[BASELINE + "cold (no stem cell)"] = Platform(
            root, "cold-base", tree=args.baseline_tree
        )
        platforms[BASELINE + "cold from a stem cell"] = Platform(
            root, "stem-base", "--prewarm", "python:3=1", tree=args.baseline_tree
        )
    out: dict[str, list[float]] = {label: [] for label in platforms}
    try:
        async with aiohttp.ClientSession(headers=identity()) as s:
            for i in range(args.colds):
                for label, p in platforms.items():
                    name = f"a{i}"
                    await timed(
                        s,
                        "PUT",
                        p.action(name) + "?overwrite=true",
                        json={"exec": {"kind": "python:3", "code": NOOP}},
                    )
                    await asyncio.sleep(0.6)  # let the stem cell be backfilled
                    out[label].append(
                        await timed(
                            s, "POST", p.action(name) + "?blocking=true&result=true", json={}
                        )
                    )
    finally:
        for p in platforms.values():
            p.stop()
    lines = ["| cold start | p50 ms | min | max |", "|---|---|---|---|"]
    for label, xs in out.items():
        lines.append(f"| {label} | {p50(xs):.1f} | {min(xs):.1f} | {max(xs):.1f} |")
    return lines


async def pause(args: argparse.Namespace, root: Path) -> list[str]:
    backend = LocalProcessBackend(root / "pause")
    handle = await backend.create(ContainerSpec("c-pause", "python:3", 256, 1))
    pid = int(handle.data["pid"])
    signals: list[float] = []
    for _ in range(1000):
        t0 = time.perf_counter()
        os.killpg(pid, signal.SIGSTOP)
        os.killpg(pid, signal.SIGCONT)
        signals.append((time.perf_counter() - t0) * 1e6)
    awaited: list[float] = []
    for _ in range(50):
        t0 = time.perf_counter()
        await backend.pause(handle)
        await backend.resume(handle)
        awaited.append((time.perf_counter() - t0) * 1e6)
    await backend.remove(handle, 0)
    # through routers: after the same idle time, a paused container (pause grace 50 ms) vs a
    # running one (pause grace 600 s), interleaved; the difference is the resume cost
    state = root / "pr"
    state.mkdir()
    mproc, manager = start(
        ["manager", "serve", "--listen", "127.0.0.1:0", "--state-dir", str(state / "s")],
        state / "m.log",
    )
    procs = [mproc]
    urls = {}
    for label, grace in (("paused", "0.05"), ("running", "600")):
        rproc, router = start(
            [
                "router",
                "--listen",
                "127.0.0.1:0",
                "--manager",
                manager,
                "--store",
                f"sqlite:///{state / 'db'}",
                "--id",
                label,
                "--pause-grace",
                grace,
            ],
            state / f"r-{label}.log",
        )
        procs.append(rproc)
        urls[label] = f"{router}/api/v1/namespaces/_/actions/{label}"
    paused: list[float] = []
    running: list[float] = []
    try:
        async with aiohttp.ClientSession(headers=identity()) as s:
            for url in urls.values():
                await timed(
                    s,
                    "PUT",
                    url + "?overwrite=true",
                    json={"exec": {"kind": "python:3", "code": NOOP}},
                )
                await timed(s, "POST", url + "?blocking=true", json={})
            for _ in range(40):
                await asyncio.sleep(0.15)  # past the 50 ms pause grace
                paused.append(await timed(s, "POST", urls["paused"] + "?blocking=true", json={}))
                await asyncio.sleep(0.15)
                running.append(await timed(s, "POST", urls["running"] + "?blocking=true", json={}))
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()
    return [
        "| pause/resume | p50 | min | max |",
        "|---|---|---|---|",
        f"| SIGSTOP + SIGCONT (router's pause + resume), us | {p50(signals):.1f} "
        f"| {min(signals):.1f} | {max(signals):.1f} |",
        f"| backend pause (until stopped) + resume, us | {p50(awaited):.1f} "
        f"| {min(awaited):.1f} | {max(awaited):.1f} |",
        f"| invoke after 150 ms idle, container paused, ms | {p50(paused):.2f} "
        f"| {min(paused):.2f} | {max(paused):.2f} |",
        f"| invoke after 150 ms idle, container not paused, ms | {p50(running):.2f} "
        f"| {min(running):.2f} | {max(running):.2f} |",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--colds", type=int, default=10)
    parser.add_argument("--only", choices=["warm", "cold", "pause"], default=None)
    parser.add_argument(
        "--baseline-tree", default=None, help="also run the warm paths of this checkout"
    )
    args = parser.parse_args()
    # the manager and routers require it of each other (a baseline tree may ignore it)
    os.environ.setdefault("APF_INTERNAL_TOKEN", secrets.token_urlsafe(32))
    parts = {"warm": warm, "cold": cold, "pause": pause}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, part in parts.items():
            if args.only not in (None, name):
                continue
            print("\n".join(await part(args, root)), end="\n\n", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
