"""How long ``/healthz`` waits while the front door learns list sizes (issue 21 item 9).

Run by hand (loopback only, bounded): starts ``apf-gateway serve`` (from this tree, or another
with ``--pythonpath``) in front of an upstream that answers every list with a Kubernetes
``PodList`` of ``--mib`` MiB, then for ``--window`` seconds lists pods in a new namespace each
time (so every response is one the gateway learns from) while probing ``/healthz`` every 10 ms.
Reported: the probes' median, p99 and worst latency, and the lists served.

    python bench/bench_list_learning.py
    python bench/bench_list_learning.py --pythonpath /work/main     # a baseline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_memory import free_port, spawn_gateway, wait_ready


def list_body(mib: float) -> bytes:
    item = {
        "metadata": {"name": "pod", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }
    one = len(json.dumps(item)) + 1
    doc = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
    doc["items"] = [item] * int(mib * 1024 * 1024 / one)
    return json.dumps(doc).encode()


async def serve_lists(body: bytes) -> asyncio.Server:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(head % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def get(port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nhost: b\r\nconnection: close\r\n\r\n".encode())
        return len(await reader.read())
    finally:
        writer.close()


async def run(args: argparse.Namespace) -> None:
    upstream = await serve_lists(list_body(args.mib))
    port = free_port()
    gw_args = argparse.Namespace(
        pythonpath=args.pythonpath, transport="h1", queued_inflight=0, gateway_arg=[]
    )
    proc = spawn_gateway(gw_args, port, upstream.sockets[0].getsockname()[1])
    probes: list[float] = []
    lists = 0
    try:
        await wait_ready(port, proc)
        deadline = time.monotonic() + args.window

        async def lister() -> None:
            nonlocal lists
            while time.monotonic() < deadline:
                await get(port, f"/api/v1/namespaces/ns{lists}/pods")
                lists += 1

        async def prober() -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                await get(port, "/healthz")
                probes.append(time.perf_counter() - started)
                await asyncio.sleep(0.01)  # the probe interval

        await asyncio.gather(lister(), prober())
    finally:
        proc.terminate()
        proc.wait(10)
        upstream.close()
    probes.sort()
    ms = [p * 1000 for p in probes]
    print(
        f"| {args.label or args.pythonpath or 'this tree'} | {args.mib:g} | {lists} | "
        f"{statistics.median(ms):.1f} | {ms[int(len(ms) * 0.99) - 1]:.1f} | {ms[-1]:.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mib", type=float, default=7.0, help="size of each list response")
    p.add_argument("--window", type=float, default=15.0, help="seconds of listing")
    p.add_argument("--pythonpath", default="", help="run the gateway from another source tree")
    p.add_argument("--label", default="")
    args = p.parse_args()
    print("| gateway | list MiB | lists | /healthz median ms | p99 ms | worst ms |")
    print("|---|---|---|---|---|---|")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
