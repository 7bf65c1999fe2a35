"""A fake kubelet that really runs a pod's container command as a local process.

The pod network is simulated by the loopback interface: ``--host 0.0.0.0`` becomes
``127.0.0.1`` (tests stay on loopback) and ``python`` is this interpreter. Readiness follows
the pod's ``tcpSocket`` probe: the pod turns Ready once the port accepts a connection.
Deletion sends SIGTERM and SIGKILL after the grace period, as the kubelet does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

from k8s_fakeapi import FakeCluster, ready_status

from gateway.supervision import GracefulStop


class ProcessKubelet:
    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    async def start(self, cluster: FakeCluster, ns: str, name: str) -> None:
        pod = cluster.objects[("pods", ns, name)]
        (container,) = pod["spec"]["containers"]
        argv = [
            sys.executable if a == "python" else ("127.0.0.1" if a == "0.0.0.0" else a)
            for a in container["command"]
        ]
        env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])}}
        self.procs[name] = subprocess.Popen(  # noqa: ASYNC220 - starts at once, no wait
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        port = container["ports"][0]["containerPort"]
        assert "tcpSocket" in container["readinessProbe"]
        while not await _accepts("127.0.0.1", port):  # the readiness probe, until the pod ends
            if self.procs[name].poll() is not None:
                return
            await asyncio.sleep(0.01)  # the probe's period
        await cluster.set_status(name, ns, ready_status("127.0.0.1"))

    async def stop(self, name: str, grace: int) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            await GracefulStop.process(proc, grace=grace).wait_async()

    def close(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


async def _accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
