"""Gateway memory under large transfers to slow peers (run by hand; loopback only; bounded).

Starts the real gateway (``apf-gateway serve``, one process per case so its peak RSS is that
case's) in front of a slow upstream run here, then for ``window`` seconds drives N concurrent
200 MB transfers:

- ``upload``: clients push a 200 MB body as fast as their sockets take it; the upstream reads
  each body at ``--rate`` bytes/s;
- ``download``: the upstream sends a 200 MB body as fast as it can; each client reads at
  ``--rate``;
- ``queued``: uploads as above to a gateway admitting ``--queued-inflight`` requests at a time
  (``--max-requests-inflight`` and ``--max-mutating-requests-inflight`` each), so the rest wait
  in APF queues, each reading some of its body ahead meanwhile (issue 21 item 6).

A slow peer never lets a transfer finish inside the window, which is the point: what the
gateway holds is then whatever it buffers between a fast side and a slow one. Reported: the
gateway's RSS when idle, its peak (VmHWM) and after the transfers were dropped, and the bytes
that reached the slow side. A case is cut short if the gateway passes ``--max-rss``.

    python bench/bench_memory.py                      # the six cases of docs/performance.md
    python bench/bench_memory.py --cases upload:3 --pythonpath /tmp/old-tree   # a baseline
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

MiB = 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Case:
    kind: str
    clients: int
    moved: int = 0
    idle_kib: int = 0
    peak_kib: int = 0
    after_kib: int = 0
    cut: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class SlowUpstream:
    def __init__(self, size: int, rate: float) -> None:
        self.size = size
        self.rate = rate
        self.received = 0
        self.sent = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"POST"):
                await self._read_slowly(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % self.size)
                block = b"d" * CHUNK
                for _ in range(self.size // CHUNK):
                    writer.write(block)
                    await writer.drain()
                    self.sent += CHUNK
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the bench dropped the transfer
        finally:
            writer.close()

    async def _read_slowly(self, reader: asyncio.StreamReader) -> None:
        left = self.size
        while left > 0:
            data = await reader.read(min(CHUNK, left))
            if not data:
                return
            left -= len(data)
            self.received += len(data)
            await asyncio.sleep(len(data) / self.rate)


async def upload(port: int, size: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /upload HTTP/1.1\r\nhost: bench\r\ncontent-length: %d\r\n\r\n" % size)
        block = b"u" * CHUNK
        for _ in range(size // CHUNK):
            writer.write(block)
            await writer.drain()
        await reader.read(1024)
    finally:
        writer.close()


async def download(port: int, rate: float) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = 0
    try:
        writer.write(b"GET /download HTTP/1.1\r\nhost: bench\r\n\r\n")
        while data := await reader.read(CHUNK):
            got += len(data)
            await asyncio.sleep(len(data) / rate)
    finally:
        writer.close()
    return got


async def run_case(case: Case, args: argparse.Namespace) -> None:
    up = SlowUpstream(args.size, args.rate)
    server = await asyncio.start_server(up.handle, "127.0.0.1", 0)
    up_port = server.sockets[0].getsockname()[1]
    port = free_port()
    proc = spawn_gateway(args, port, up_port, queued=case.kind == "queued")
    try:
        await wait_ready(port, proc)
        case.idle_kib = status_kib(proc.pid, "VmRSS")
        downloads: list[asyncio.Task[int]] = []
        for _ in range(case.clients):
            if case.kind in ("upload", "queued"):
                case.tasks.append(asyncio.ensure_future(upload(port, args.size)))
            else:
                downloads.append(asyncio.ensure_future(download(port, args.rate)))
        deadline = time.monotonic() + args.window
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            if status_kib(proc.pid, "VmRSS") > args.max_rss // 1024:
                case.cut = True
                break
        case.peak_kib = status_kib(proc.pid, "VmHWM")
        for t in [*case.tasks, *downloads]:
            t.cancel()
        await asyncio.gather(*case.tasks, *downloads, return_exceptions=True)
        case.moved = up.sent if case.kind == "download" else up.received
        await asyncio.sleep(args.settle)
        case.after_kib = status_kib(proc.pid, "VmRSS")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        server.close()


def spawn_gateway(
    args: argparse.Namespace, port: int, up_port: int, *, queued: bool = False
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    cmd = [
        sys.executable, "-m", "gateway.cli.main", "serve",
        "--listen", f"127.0.0.1:{port}", "--upstream", f"http://127.0.0.1:{up_port}",
        "--proxy-transport", args.transport,
    ]  # fmt: skip
    if queued:
        n = str(args.queued_inflight)
        cmd += ["--max-requests-inflight", n, "--max-mutating-requests-inflight", n]
    cmd += args.gateway_arg
    # ``-m`` puts the working directory first on sys.path: run from the tree measured.
    return subprocess.Popen(
        cmd, env=env, cwd=args.pythonpath or None,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


async def wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    url = f"http://127.0.0.1:{port}/readyz"
    for _ in range(200):
        if proc.poll() is not None:
            raise RuntimeError(
                f"gateway exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            await asyncio.to_thread(urllib.request.urlopen, url, timeout=1)
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError("gateway did not become ready")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--cases", default="upload:1,upload:10,upload:50,download:1,download:10,download:50"
    )
    p.add_argument("--size", type=int, default=200 * 1000 * 1000, help="bytes per transfer")
    p.add_argument("--rate", type=float, default=2 * MiB, help="slow peer's bytes/s per transfer")
    p.add_argument("--window", type=float, default=10.0, help="seconds of transfer per case")
    p.add_argument("--settle", type=float, default=2.0, help="seconds before the 'after' RSS")
    p.add_argument("--transport", default="h1")
    p.add_argument("--max-rss", type=int, default=3 * 1024 * MiB, help="cut a case above this")
    p.add_argument("--queued-inflight", type=int, default=10, help="admitted at once, 'queued'")
    p.add_argument(
        "--gateway-arg", action="append", default=[], help="one more `serve` argument (repeatable)"
    )
    p.add_argument("--pythonpath", default="", help="run the gateway from another source tree")
    args = p.parse_args()
    print("| case | idle RSS MiB | peak RSS MiB | after MiB | MB through |")
    print("|---|---|---|---|---|")
    for spec in args.cases.split(","):
        kind, _, n = spec.partition(":")
        case = Case(kind, int(n))
        asyncio.run(run_case(case, args))
        print(
            f"| {case.clients} x {kind} | {case.idle_kib / 1024:.0f} | "
            f"{case.peak_kib / 1024:.0f}{' (cut)' if case.cut else ''} | "
            f"{case.after_kib / 1024:.0f} | {case.moved / 1e6:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
