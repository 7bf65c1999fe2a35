"""Helpers for the platform tests: real manager and router processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.platform import internal_token
from gateway.supervision import Spec, StartError, Supervisor
from tests.support.wait import async_wait_for

T = TypeVar("T")
IDENTITY = {"X-Remote-User": "alice", "X-Remote-Extra-Namespace": "guest"}

SLOW = """
import time
def main(args):
    time.sleep(args.get("sleep", 0.3))
    return {"slept": args.get("sleep", 0.3)}
"""


class Proc:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        # started and awaited as ``apf-gateway up`` starts its children (gateway.supervision)
        spec = Spec(args[0], [sys.executable, "-m", "gateway", *args], log, restart=False)
        starting = Supervisor(report=lambda _: None, start_timeout=15)
        child = starting.add(spec)
        self.popen = child.proc
        try:
            starting.wait_ready()
        except StartError as exc:
            starting.stop()
            raise RuntimeError(f"{exc}\n{log.read_text()[-3000:]}") from None
        self.url = child.url

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        try:
            return self.popen.wait(timeout)
        finally:
            if self.popen.stdout is not None:
                self.popen.stdout.close()


class Platform:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.store = f"sqlite:///{root / 'platform.db'}"
        self.manager: Proc | None = None
        self.routers: dict[str, Proc] = {}
        # the internal token the manager and routers require of each other (and of us)
        self.token_file = root / "internal-token"
        self.token = internal_token.write(self.token_file)
        self.auth = internal_token.bearer(self.token)

    def start_manager(self, *extra: str, port: int = 0) -> Proc:
        self.manager = Proc(
            [
                "manager",
                "serve",
                "--listen",
                f"127.0.0.1:{port}",
                "--state-dir",
                str(self.state),
                "--grace-seconds",
                "1",
                "--internal-token-file",
                str(self.token_file),
                *extra,
            ],
            self.root / "manager.log",
        )
        return self.manager

    def start_router(self, rid: str = "r1", *extra: str) -> Proc:
        assert self.manager is not None
        proc = Proc(
            [
                "router",
                "--listen",
                "127.0.0.1:0",
                "--manager",
                self.manager.url,
                "--store",
                self.store,
                "--id",
                rid,
                "--internal-token-file",
                str(self.token_file),
                *extra,
            ],
            self.root / f"router-{rid}.log",
        )
        self.routers[rid] = proc
        return proc

    def runtime_pids(self) -> list[int]:
        pids = []
        for record in (self.state / "containers").glob("*/container.json"):
            with contextlib.suppress(OSError, ValueError):
                pids.append(int(json.loads(record.read_text())["pid"]))
        return pids

    def close(self) -> None:
        for proc in self.routers.values():
            with contextlib.suppress(Exception):
                proc.stop()
        if self.manager is not None:
            with contextlib.suppress(Exception):
                self.manager.stop()
        for pid in self.runtime_pids():  # never leave runtimes behind, even on failure
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def post(url: str, body: dict[str, Any], secret: str = "") -> tuple[int, dict[str, Any]]:
    """A blocking POST to a runtime (with its container secret, if given)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    if secret:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def action_url(router: Proc, name: str, ns: str = "_") -> str:
    return f"{router.url}/api/v1/namespaces/{ns}/actions/{name}"


async def put_action(
    client: httpx.AsyncClient, router: Proc, name: str, code: str, **extra: Any
) -> dict[str, Any]:
    body = {"exec": {"kind": "python:3", "code": code}, **extra}
    resp = await client.put(action_url(router, name) + "?overwrite=true", json=body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def invoke(
    client: httpx.AsyncClient,
    router: Proc,
    name: str,
    params: dict[str, Any] | None = None,
    query: str = "blocking=true",
) -> httpx.Response:
    return await client.post(action_url(router, name) + "?" + query, json=params or {})


def openwhisk_error(r: httpx.Response, status: int) -> str:
    """``r`` is OpenWhisk's error body ``{"error", "code"}`` with ``status``: its message."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert set(doc) == {"error", "code"} and re.match(r"^[0-9a-f]{32}$", doc["code"]), doc
    return str(doc["error"])


def annotation(record: dict[str, Any], key: str) -> Any:
    return next((a["value"] for a in record["annotations"] if a["key"] == key), None)


async def manager_containers(client: httpx.AsyncClient, platform: Platform) -> list[dict[str, Any]]:
    assert platform.manager is not None
    resp = await client.get(platform.manager.url + "/v1/containers", headers=platform.auth)
    return list(resp.json()["containers"])


async def router_state(client: httpx.AsyncClient, url: str, auth: dict[str, str]) -> dict[str, int]:
    """The router's containers: ``{id: activations in flight}``."""
    resp = await client.get(url + "/_platform/v1/state", headers=auth)
    return {c["id"]: c["in_flight"] for c in resp.json()["containers"]}


async def manager_containers_until(
    client: httpx.AsyncClient,
    platform: Platform,
    cond: Callable[[dict[str, dict[str, Any]]], bool],
    what: str,
    timeout: float = 15.0,  # noqa: ASYNC109 - the polling bound
) -> dict[str, dict[str, Any]]:
    """Poll the manager's containers (by id) until ``cond`` holds for them; them."""
    last: dict[str, dict[str, Any]] = {}

    async def check() -> dict[str, dict[str, Any]] | None:
        nonlocal last
        last = {c["id"]: c for c in await manager_containers(client, platform)}
        return last if cond(last) else None

    return await async_wait_for(check, timeout, lambda: f"{what} (containers: {last})", 0.05)


async def wait_running(
    client: httpx.AsyncClient, url: str, auth: dict[str, str], count: int
) -> dict[str, int]:
    """Poll the router until ``count`` activations run in its containers (its state)."""

    async def running() -> dict[str, int] | None:
        state = await router_state(client, url, auth)
        return state if sum(state.values()) >= count else None

    return await async_wait_for(running, 20, f"{count} activations running at {url}")


async def recorded(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """Poll ``GET url`` (an activation or its logs, maybe still in a router's writer) until it
    is 200."""

    async def found() -> httpx.Response | None:
        got = await client.get(url)
        return got if got.status_code == 200 else None

    return await async_wait_for(found, 30, f"the record at {url}")


async def scrape(client: httpx.AsyncClient, base: str) -> dict[str, float]:
    """``GET base/metrics`` as ``{'name{label="v",...}': value}`` (labels sorted)."""

    resp = await client.get(base + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def alive(pid: int) -> bool:
    """The process runs (a zombie does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


POLL_LIVEZ = """
import select, sys, time, urllib.request
slowest, url = 0.0, sys.argv[1] + "/livez"
print("polling", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:  # until stdin is closed
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        assert answer.status == 200
    slowest = max(slowest, time.perf_counter() - t0)
print(slowest, flush=True)
"""


async def slowest_livez(url: str, work: Callable[[], T]) -> tuple[T, float]:
    """Run ``work`` (in a thread) while another process asks ``url/livez`` back to back: its
    result and the slowest answer, what a lease renewal on the router's loop would wait. The
    poller is a process of its own, so what ``work`` costs this process's GIL is not counted."""
    poller = await asyncio.create_subprocess_exec(
        sys.executable, "-c", POLL_LIVEZ, url, stdin=PIPE, stdout=PIPE
    )
    assert poller.stdin is not None and poller.stdout is not None
    try:
        assert await poller.stdout.readline() == b"polling\n"
        result = await asyncio.to_thread(work)
    finally:
        poller.stdin.close()  # the poller stops after its current request
        slowest = await poller.stdout.read()
        await poller.wait()
    return result, float(slowest)
