"""Run the manager only while this replica holds the Lease (manager high availability).

``python -m gateway.manager.backends.k8s.supervise [options] -- apf-gateway manager serve ...``

Every replica of the manager Deployment runs this supervisor. The one that wins the Lease
starts the command (the manager, with ``--keep-containers`` so action pods survive a
failover: the next leader adopts them from their labels); the others wait as standbys.

- ``/readyz`` on ``--health-listen`` is 200 only on the leader with its manager running (and,
  with ``--ready-url``, answering 200 there), so the manager Service routes to the leader
  alone; ``/livez`` is 200 while the loop runs.
- Leadership lost (no renewal within the renew deadline, or another holder): SIGTERM to the
  manager, SIGKILL after ``lease_duration - renew_deadline`` s (it must be gone before a
  standby can take over), then exit 1 so the kubelet restarts us as a standby (client-go
  exits the same way).
- The manager exits on its own: release the Lease and exit with its status.
- SIGTERM/SIGINT (rollout, node drain): stop the manager, release the Lease (a standby takes
  over within one retry period), exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence

import aiohttp
from aiohttp import web

from gateway.clock import AsyncioEventClock
from gateway.manager.backends.k8s.api import KubeApi
from gateway.manager.backends.k8s.lease import KubeLeaseStore
from gateway.manager.backends.k8s.options import SERVICE_ACCOUNT_NAMESPACE
from gateway.manager.leader import ElectionConfig, LeaderElection, election_step, release
from gateway.platform.serving import parse_listen

log = logging.getLogger("gateway.manager.supervise")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.manager.backends.k8s.supervise",
        description="run a command only while holding a coordination.k8s.io/v1 Lease",
    )
    env = os.environ.get
    parser.add_argument("--lease", default=env("APF_K8S_LEASE", "apf-gateway-manager"))
    parser.add_argument("--namespace", default=env("APF_K8S_NAMESPACE"))
    parser.add_argument("--identity", default=env("POD_NAME") or socket.gethostname())
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    parser.add_argument("--health-listen", default="0.0.0.0:7072", help="HOST:PORT")
    parser.add_argument("--server", default=env("APF_K8S_SERVER"), help="API URL (tests)")
    parser.add_argument("--ready-url", help="the command is ready when this URL answers 200")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("a command to run is required after --")
    return args


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.config = ElectionConfig(args.lease_duration, args.renew_deadline, args.retry_period)
        namespace = args.namespace or _service_account_namespace()
        self.api = KubeApi(namespace, args.server)
        self.store = KubeLeaseStore(
            self.api, args.lease, {"app.kubernetes.io/managed-by": "apf-gateway-manager"}
        )
        self.election = LeaderElection(args.identity, self.config, AsyncioEventClock(), time.time)
        self.child: asyncio.subprocess.Process | None = None
        self.stop = asyncio.Event()

    def leading(self) -> bool:
        return self.election.is_leader and self.child is not None and self.child.returncode is None

    async def ready(self) -> bool:
        if not self.leading():
            return False
        if not self.args.ready_url:
            return True
        timeout = aiohttp.ClientTimeout(total=1.0)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.get(self.args.ready_url) as resp,
            ):
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        runner = await self._serve_health()
        try:
            return await self._loop()
        finally:
            await runner.cleanup()
            await self.api.close()

    async def _loop(self) -> int:
        while not self.stop.is_set():
            leading = await election_step(self.election, self.store)
            if leading and self.child is None:
                log.info("leading: starting %s", " ".join(self.args.command))
                self.child = await asyncio.create_subprocess_exec(*self.args.command)
            elif not leading and self.child is not None:
                await self._stop_child(self.config.lease_duration - self.config.renew_deadline)
                return 1
            if self.child is not None and self.child.returncode is not None:
                code = self.child.returncode
                log.warning("the manager exited with %s; giving up the lease", code)
                await release(self.election, self.store)
                return code or 1
            await self._wait(self.config.retry_period)
        await self._stop_child(self.config.lease_duration)
        await release(self.election, self.store)
        return 0

    async def _wait(self, seconds: float) -> None:
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(self.stop.wait())]
        if self.child is not None:
            waits.append(asyncio.ensure_future(self.child.wait()))
        _, pending = await asyncio.wait(waits, timeout=seconds, return_when="FIRST_COMPLETED")
        for task in pending:
            task.cancel()

    async def _stop_child(self, grace: float) -> None:
        child, self.child = self.child, None
        if child is None or child.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        try:
            await asyncio.wait_for(child.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()

    async def _serve_health(self) -> web.AppRunner:
        async def livez(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def readyz(_: web.Request) -> web.Response:
            if await self.ready():
                return web.Response(text="ok: leader\n")
            if self.leading():
                return web.Response(status=503, text="leader: the manager is not ready yet\n")
            return web.Response(status=503, text="standby: not the leader\n")

        app = web.Application()
        app.router.add_get("/livez", livez)
        app.router.add_get("/healthz", livez)
        app.router.add_get("/readyz", readyz)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        host, port = parse_listen(self.args.health_listen)
        site = web.TCPSite(runner, host, port)
        await site.start()
        return runner


def _service_account_namespace() -> str:
    if SERVICE_ACCOUNT_NAMESPACE.exists():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        ElectionConfig(args.lease_duration, args.renew_deadline, args.retry_period)
    except ValueError as exc:
        print(f"supervise: {exc}", file=sys.stderr)
        return 2

    async def go() -> int:
        return await Supervisor(args).run()

    return asyncio.run(go())


if __name__ == "__main__":
    raise SystemExit(main())
