"""Action runtime: cold start and warm latency, against two other server shapes.

    .venv/bin/python bench/bench_runtime.py [--rounds 3] [--starts 10] [--runs 2000]

Variants, interleaved A B C per round (same machine, same client):
  ours     python -m gateway.runtime (threaded blocking-socket server, no asyncio)
  asyncio  the same two routes on asyncio.start_server (hand-parsed HTTP/1.1)
  uvicorn  a raw ASGI app on uvicorn (httptools, no uvloop, one worker)

Measured per variant: spawn -> first HTTP response ("start"), and warm POST /run latency over
one keep-alive connection (http.client, sequential). For ours also the full cold start the
router pays: spawn -> LISTENING -> /init -> first /run, plus /init alone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

ACTION = "def main(args):\n    return {'greeting': 'hello ' + args.get('name', 'world')}\n"
INIT = json.dumps({"value": {"name": "hello", "main": "main", "code": ACTION}}).encode()
RUN = json.dumps({"value": {"name": "bench"}, "activation_id": "a" * 32}).encode()

ASYNCIO_SERVER = r"""
import asyncio, json, sys
def main(args): return {"greeting": "hello " + args.get("name", "world")}
async def handle(reader, writer):
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        body = json.loads(await reader.readexactly(length)) if length else {}
        out = json.dumps(main(body.get("value", {}))).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(out) + out)
        await writer.drain()
async def serve():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print("LISTENING", server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(serve())
"""

UVICORN_SERVER = r"""
import json, socket, sys, uvicorn
def main(args): return {"greeting": "hello " + args.get("name", "world")}
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    out = json.dumps(main(json.loads(body).get("value", {}) if body else {})).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})
sock = socket.create_server(("127.0.0.1", 0))
# without this, uvicorn serving a pre-bound socket stalls 40 ms per request (Nagle + delayed ACK)
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
print("LISTENING", sock.getsockname()[1], flush=True)
config = uvicorn.Config(app, http="httptools", loop="asyncio", log_level="warning",
                        lifespan="off", access_log=False)
uvicorn.Server(config).run(sockets=[sock])
"""


def spawn(cmd: list[str], *, log_file: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start a server and read its ``LISTENING <port>`` line.

    With ``log_file`` its stdout goes to that file (polled for the first line), so that no
    thread of this process has to drain a pipe while latencies are measured.
    """
    if log_file is not None:
        with open(log_file, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        while True:
            with open(log_file, "rb") as f:
                first = f.readline()
            if first.endswith(b"\n") or proc.poll() is not None:
                break
            time.sleep(0.0005)
        line = first.split()
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        # the runtime writes log sentinels after every request: an undrained pipe blocks it
        threading.Thread(target=proc.stdout.read, daemon=True).start()
    if not line or line[0] != b"LISTENING":
        proc.kill()
        raise SystemExit(f"{cmd} did not start")
    return proc, int(line[1])


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> int:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


def first_response(port: int, path: str) -> None:
    """Retry the connection until the server answers (uvicorn listens before it serves)."""
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            post(conn, path, RUN)
            return
        except (ConnectionError, http.client.HTTPException):
            time.sleep(0.001)
        finally:
            conn.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def start_time(cmd: list[str], ready_path: str) -> float:
    begin = time.perf_counter()
    proc, port = spawn(cmd)
    first_response(port, ready_path)
    elapsed = time.perf_counter() - begin
    stop(proc)
    return elapsed


def warm_runs(cmd: list[str], needs_init: bool, runs: int) -> list[float]:
    proc, port = spawn(cmd, log_file=os.path.join(tempfile.gettempdir(), "bench_runtime.log"))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        first_response(port, "/run")
        if needs_init:
            assert post(conn, "/init", INIT) == 200
        for _ in range(50):
            post(conn, "/run", RUN)
        samples = []
        for _ in range(runs):
            begin = time.perf_counter()
            assert post(conn, "/run", RUN) == 200
            samples.append(time.perf_counter() - begin)
        return samples
    finally:
        conn.close()
        stop(proc)


def cold_start(cmd: list[str]) -> tuple[float, float, float]:
    """(spawn -> LISTENING, /init, spawn -> first /run answered) for our runtime."""
    begin = time.perf_counter()
    proc, port = spawn(cmd)
    listening = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    assert post(conn, "/init", INIT) == 200
    initialised = time.perf_counter()
    assert post(conn, "/run", RUN) == 200
    done = time.perf_counter()
    conn.close()
    stop(proc)
    return listening - begin, initialised - listening, done - begin


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def us(x: float) -> str:
    return f"{x * 1e6:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    scripts = {}
    for name, text in (("asyncio", ASYNCIO_SERVER), ("uvicorn", UVICORN_SERVER)):
        scripts[name] = os.path.join(tmp, f"{name}_server.py")
        with open(scripts[name], "w") as f:
            f.write(text)
    ours = [sys.executable, "-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0"]
    variants: dict[str, tuple[list[str], bool]] = {
        "ours": (ours, True),
        "asyncio": ([sys.executable, scripts["asyncio"]], False),
        "uvicorn": ([sys.executable, scripts["uvicorn"]], False),
    }
    starts: dict[str, list[float]] = {name: [] for name in variants}
    warm: dict[str, list[list[float]]] = {name: [] for name in variants}
    colds: list[tuple[float, float, float]] = []
    for _ in range(args.rounds):
        for _ in range(args.starts):
            for name, (cmd, _) in variants.items():
                starts[name].append(start_time(cmd, "/run"))
            colds.append(cold_start(ours))
        for name, (cmd, needs_init) in variants.items():
            warm[name].append(warm_runs(cmd, needs_init, args.runs))

    report: Callable[[str], None] = print
    report(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, rounds={args.rounds}, "
        f"starts/round={args.starts}, warm runs/round={args.runs}"
    )
    report(
        "\n| variant | spawn -> first response p50 ms (min-max of round medians) | "
        "ratio vs uvicorn | warm /run p50 us | warm /run p99 us | ratio p50 vs uvicorn |"
    )
    report("|---|---|---|---|---|---|")
    base_start = statistics.median(starts["uvicorn"])
    base_warm = statistics.median([statistics.median(r) for r in warm["uvicorn"]])
    for name in variants:
        per_round = [
            statistics.median(starts[name][i * args.starts : (i + 1) * args.starts])
            for i in range(args.rounds)
        ]
        p50s = [statistics.median(r) for r in warm[name]]
        p99s = [pct(r, 0.99) for r in warm[name]]
        report(
            f"| {name} | {ms(statistics.median(starts[name]))} "
            f"({ms(min(per_round))}-{ms(max(per_round))}) | "
            f"{statistics.median(starts[name]) / base_start:.2f} | "
            f"{us(statistics.median(p50s))} ({us(min(p50s))}-{us(max(p50s))}) | "
            f"{us(statistics.median(p99s))} | {statistics.median(p50s) / base_warm:.2f} |"
        )
    listen = [c[0] for c in colds]
    init = [c[1] for c in colds]
    total = [c[2] for c in colds]
    report(f"\nOur runtime, cold start as the router sees it (n={len(colds)}):")
    report("\n| step | p50 ms | p99 ms | min ms | max ms |\n|---|---|---|---|---|")
    for label, values in (
        ("spawn -> LISTENING", listen),
        ("POST /init", init),
        ("spawn -> init -> first /run done", total),
    ):
        report(
            f"| {label} | {ms(statistics.median(values))} | {ms(pct(values, 0.99))} | "
            f"{ms(min(values))} | {ms(max(values))} |"
        )


if __name__ == "__main__":
    main()
