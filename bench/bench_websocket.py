"""WebSocket relay throughput: through the gateway (``serve``, APF on) vs the upstream direct.

Run by hand:

    .venv/bin/python bench/bench_websocket.py --rounds 3 --duration 4

The upstream is an aiohttp.web echo server (one process); the gateway one process in front of
it; the client (this process, aiohttp) keeps ``--connections`` websockets open, each sending
one message and awaiting its echo in a loop. Rounds alternate direct and gateway for each
message size. Reported: echoed messages per second and MB/s of payload (each echo moves the
message both ways, counted once), and the gateway's ratio to direct (median, min-max).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import aiohttp
from bench_frontdoor import PY, gateway_args, process

UPSTREAM_APP = """
import sys
from aiohttp import web, WSMsgType
async def echo(request):
    ws = web.WebSocketResponse(max_msg_size=16 * 1024 * 1024)
    await ws.prepare(request)
    async for msg in ws:
        if msg.type is WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
        elif msg.type is WSMsgType.TEXT:
            await ws.send_str(msg.data)
    return ws
app = web.Application()
app.router.add_get("/echo", echo)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""

SIZES = {"small (64 B)": 64, "large (256 KiB)": 256 * 1024}


async def measure(port: int, size: int, connections: int, duration: float) -> float:
    """Echoed messages per second over ``duration`` seconds."""
    payload = b"m" * size
    count = 0
    async with aiohttp.ClientSession() as session:
        sockets = [
            await session.ws_connect(f"ws://127.0.0.1:{port}/echo", max_msg_size=16 * 1024 * 1024)
            for _ in range(connections)
        ]
        deadline = time.perf_counter() + duration

        async def loop(ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                await ws.send_bytes(payload)
                msg = await ws.receive()
                assert msg.type is aiohttp.WSMsgType.BINARY and len(msg.data) == size
                count += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop(ws) for ws in sockets))
        elapsed = time.perf_counter() - started
        for ws in sockets:
            await ws.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    upstream, gateway = 18911, 18912
    results: dict[tuple[str, str], list[float]] = {}
    with (
        process([PY, "-c", UPSTREAM_APP, str(upstream)], upstream),
        process(gateway_args(gateway, upstream, "--websocket-max-message-bytes=1048576"), gateway),
    ):
        for name, size in SIZES.items():
            for _ in range(args.rounds):
                for variant, port in (("direct", upstream), ("gateway", gateway)):
                    rate = asyncio.run(measure(port, size, args.connections, args.duration))
                    results.setdefault((name, variant), []).append(rate)
    print(f"{args.connections} connections, {args.rounds} rounds of {args.duration:g}s, medians")
    print("| message | direct msg/s | gateway msg/s | direct MB/s | gateway MB/s | ratio |")
    print("|---|---|---|---|---|---|")
    for name, size in SIZES.items():
        direct, through = results[(name, "direct")], results[(name, "gateway")]
        ratios = [g / d for g, d in zip(through, direct, strict=True)]
        d, g = statistics.median(direct), statistics.median(through)
        print(
            f"| {name} | {d:,.0f} | {g:,.0f} | {d * size / 1e6:,.1f} | {g * size / 1e6:,.1f} "
            f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    sys.exit(main())
