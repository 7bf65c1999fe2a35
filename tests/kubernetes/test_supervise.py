"""The leader-elected supervisor as real processes against the fake API server: only the
Lease holder runs the manager command and is ready; on SIGTERM it stops the command and
releases the Lease, and the standby takes over."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path

import aiohttp
from conftest import NS
from k8s_fakeapi import FakeCluster

from tests.support.ports import free_port
from tests.support.wait import async_wait_until

CHILD = """
import signal, sys, time
path = sys.argv[1]
def stop(*_):
    open(path, "a").write("stopped\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(path, "a").write("started\\n")
while True:
    time.sleep(1)
"""


async def start(identity: str, url: str, port: int, marker: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.manager.backends.k8s.supervise",
        "--server",
        url,
        "--namespace",
        NS,
        "--identity",
        identity,
        "--lease-duration",
        "3",
        "--renew-deadline",
        "2",
        "--retry-period",
        "0.1",
        "--health-listen",
        f"127.0.0.1:{port}",
        "--",
        sys.executable,
        "-c",
        CHILD,
        str(marker),
        stderr=asyncio.subprocess.DEVNULL,
    )


async def status(http: aiohttp.ClientSession, port: int, path: str) -> int:
    try:
        async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


async def test_only_the_leader_runs_the_manager_and_hands_over_on_sigterm(
    cluster: FakeCluster, api_url: str, tmp_path: Path
) -> None:
    port_a, port_b = free_port(), free_port()
    marker_a, marker_b = tmp_path / "a", tmp_path / "b"
    a = await start("manager-a", api_url, port_a, marker_a)
    b = None
    async with aiohttp.ClientSession() as http:
        try:

            async def a_started() -> bool:
                return marker_a.exists() and "started" in marker_a.read_text()

            await async_wait_until(a_started)
            await async_wait_until(lambda: _is(status(http, port_a, "/readyz"), 200))
            b = await start("manager-b", api_url, port_b, marker_b)
            await async_wait_until(lambda: _is(status(http, port_b, "/livez"), 200))
            assert await status(http, port_b, "/readyz") == 503
            assert not marker_b.exists()  # the standby does not run the manager
            lease = cluster.objects[("leases", NS, "apf-gateway-manager")]
            assert lease["spec"]["holderIdentity"] == "manager-a"

            a.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(a.wait(), 15) == 0
            assert marker_a.read_text() == "started\nstopped\n"

            async def b_started() -> bool:
                return marker_b.exists() and "started" in marker_b.read_text()

            await async_wait_until(b_started, 5.0)  # after a release: one retry period, not 3 s
            lease = cluster.objects[("leases", NS, "apf-gateway-manager")]
            assert lease["spec"]["holderIdentity"] == "manager-b"
            assert lease["spec"]["leaseTransitions"] >= 1
            await async_wait_until(lambda: _is(status(http, port_b, "/readyz"), 200))
        finally:
            for proc in (a, b):
                if proc is not None and proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(proc.wait(), 15)


async def _is(awaitable: Awaitable[int], expected: int) -> bool:
    return bool(await awaitable == expected)


async def test_a_manager_that_exits_gives_the_lease_up(
    cluster: FakeCluster, api_url: str, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.manager.backends.k8s.supervise",
        "--server", api_url, "--namespace", NS, "--identity", "manager-x",
        "--retry-period", "0.1", "--lease-duration", "3", "--renew-deadline", "2",
        "--health-listen", f"127.0.0.1:{free_port()}",
        "--", sys.executable, "-c", "import sys; sys.exit(3)",
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert await asyncio.wait_for(proc.wait(), 15) == 3
    lease = cluster.objects[("leases", NS, "apf-gateway-manager")]
    assert lease["spec"]["holderIdentity"] == ""  # released: a standby takes over at once


SERVING_CHILD = """
import http.server, os, sys, time
marker, go, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
open(marker, "a").write("started\\n")
while not os.path.exists(go):
    time.sleep(0.01)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


async def test_the_leader_is_ready_only_once_its_manager_answers(
    cluster: FakeCluster, api_url: str, tmp_path: Path
) -> None:
    health, child_port = free_port(), free_port()
    marker, go = tmp_path / "started", tmp_path / "go"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.manager.backends.k8s.supervise",
        "--server", api_url, "--namespace", NS, "--identity", "manager-r",
        "--retry-period", "0.1", "--lease-duration", "3", "--renew-deadline", "2",
        "--health-listen", f"127.0.0.1:{health}",
        "--ready-url", f"http://127.0.0.1:{child_port}/readyz",
        "--", sys.executable, "-c", SERVING_CHILD, str(marker), str(go), str(child_port),
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    async with aiohttp.ClientSession() as http:
        try:

            async def started() -> bool:
                return marker.exists()

            await async_wait_until(started)
            await async_wait_until(lambda: _is(status(http, health, "/livez"), 200))
            assert await status(http, health, "/readyz") == 503  # leader, manager not serving
            go.write_text("")
            await async_wait_until(lambda: _is(status(http, health, "/readyz"), 200))
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
