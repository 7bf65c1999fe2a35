"""Front-door throughput and latency: direct upstream, nginx, our proxy with APF off and on.

Run by hand (needs ``wrk`` and ``nginx`` from Debian):

    .venv/bin/python bench/bench_frontdoor.py --rounds 3 --duration 8

Every variant runs as one process with one worker in front of the same trivial upstream
(uvicorn, raw ASGI, httptools + uvloop) on 127.0.0.1; wrk, the variant and the upstream share
the machine's cores. Rounds are interleaved (A B C D A B C D ...). Throughput: ``wrk -t1 -c32``;
latency at moderate load: ``wrk -t1 -c4`` (closed loop), p50 minus the direct upstream's p50.
``--transports`` instead compares the proxy's upstream clients (APF off). ``--pairs N`` runs
only APF off and on, in N short back-to-back pairs, for machines too noisy for long rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gateway.compiled import build_tree

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PATH = "/api/v1/namespaces/default/pods"
OFF = ("--enable-priority-and-fairness=false",)

UPSTREAM_APP = """
import uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})
uvicorn.run(app, host="127.0.0.1", port=int(__import__("sys").argv[1]), loop="uvloop",
            http="httptools", log_level="warning", access_log=False, lifespan="off")
"""

NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir};
    proxy_temp_path {dir};
    fastcgi_temp_path {dir};
    uwsgi_temp_path {dir};
    scgi_temp_path {dir};
    upstream up {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port}{listen_tls};{server_tls}
        location / {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;{location_tls}
        }}
    }}
}}
"""

# What bench_tls.py's nginx adds: HTTPS with the gateway's certificate, keep-alive held open.
NGINX_TLS = {
    "listen_tls": " ssl",
    "server_tls": """
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        keepalive_requests 1000000;""",
    "location_tls": """
            proxy_set_header X-Forwarded-Proto https;""",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


PIDS: dict[int, list[int]] = {}  # port -> processes serving it (for CPU accounting)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes, from /proc (clock ticks)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def process(args: list[str], port: int, tree: Path = ROOT) -> Iterator[None]:
    """Run a variant from ``tree`` (the checkout, or a copy built with the compiled hot path)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        args, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    PIDS[port] = [proc.pid]
    try:
        wait_port(port)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def nginx(port: int, upstream: int, tls: tuple[Path, Path] | None = None) -> Iterator[None]:
    """nginx with one worker proxying to ``upstream``; HTTPS with ``tls`` (cert, key)."""
    d = tempfile.mkdtemp(prefix="bench-nginx-tls-" if tls else "bench-nginx-")
    conf = Path(d, "nginx.conf")
    extra = dict.fromkeys(NGINX_TLS, "")
    if tls is not None:
        extra = {k: v.format(cert=tls[0], key=tls[1]) for k, v in NGINX_TLS.items()}
    conf.write_text(NGINX_CONF.format(dir=d, port=port, upstream=upstream, **extra))
    subprocess.run(["nginx", "-c", str(conf)], check=True)
    try:
        wait_port(port)
        master = Path(d, "nginx.pid").read_text().strip()
        children = ["pgrep", "-P", master]
        workers = subprocess.run(children, check=True, capture_output=True, text=True).stdout
        PIDS[port] = [int(p) for p in workers.split()]
        yield
    finally:
        subprocess.run(["nginx", "-c", str(conf), "-s", "stop"], check=False)
        time.sleep(0.3)
        shutil.rmtree(d, ignore_errors=True)


def gateway_args(port: int, upstream: int, *extra: str) -> list[str]:
    return [
        PY, "-m", "gateway", "serve", "--listen", f"127.0.0.1:{port}",
        "--upstream", f"http://127.0.0.1:{upstream}", "--log-level", "warning", *extra,
    ]  # fmt: skip


def wrk(port: int, connections: int, duration: float) -> tuple[float, float, float, float]:
    """req/s, p50 ms, p99 ms, and CPU microseconds per request of the serving process."""
    before = cpu_seconds(PIDS[port])
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency",
         f"http://127.0.0.1:{port}{PATH}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cpu = cpu_seconds(PIDS[port]) - before
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise RuntimeError(f"non-2xx responses on port {port}:\n{out}")

    def pct(p: str) -> float:
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        assert m, out
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    return rps, pct("50"), pct("99"), cpu / total * 1e6


def run(
    variants: dict[str, contextlib.AbstractContextManager[None]],
    ports: dict[str, int],
    rounds: int,
    duration: float,
) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {
        v: {"rps": [], "p50": [], "p99": [], "lat50": [], "lat99": [], "cpu": []} for v in variants
    }
    with contextlib.ExitStack() as stack:
        for cm in variants.values():
            stack.enter_context(cm)
        for name in variants:  # warm-up
            wrk(ports[name], 32, 1)
        for r in range(rounds):
            for name in variants:
                rps, p50, p99, cpu = wrk(ports[name], 32, duration)
                _, l50, l99, _ = wrk(ports[name], 4, max(2.0, duration / 2))
                res = results[name]
                res["rps"].append(rps)
                res["p50"].append(p50)
                res["p99"].append(p99)
                res["lat50"].append(l50)
                res["lat99"].append(l99)
                res["cpu"].append(cpu)
                print(
                    f"round {r + 1} {name:>14}: {rps:9.0f} req/s  p50 {p50:6.2f} ms  "
                    f"p99 {p99:6.2f} ms  | c4 p50 {l50:5.2f} ms",
                    flush=True,
                )
    return results


def paired(ports: tuple[int, int], pairs: int, duration: float) -> None:
    """APF off and on back to back, ``pairs`` times, in ABBA order: on a shared machine the
    noise moves over tens of seconds, so the two halves of one short pair see nearly the same
    machine, and each pair gives its own ratio."""
    off_port, on_port = ports
    for port in ports:  # warm-up
        wrk(port, 32, 1)
    rps_ratios: list[float] = []
    cpu_ratios: list[float] = []
    for i in range(pairs):
        order = ports if i % 2 == 0 else ports[::-1]
        got = {port: wrk(port, 32, duration) for port in order}
        (off_rps, _, _, off_cpu), (on_rps, _, _, on_cpu) = got[off_port], got[on_port]
        rps_ratios.append(on_rps / off_rps)
        cpu_ratios.append(off_cpu / on_cpu)
        print(
            f"pair {i + 1:>2}: off {off_rps:7.0f} req/s {off_cpu:5.1f} us/req, "
            f"on {on_rps:7.0f} req/s {on_cpu:5.1f} us/req: {on_rps / off_rps:.3f}x",
            flush=True,
        )
    for label, values in (("req/s", rps_ratios), ("CPU per request", cpu_ratios)):
        q1, _, q3 = statistics.quantiles(values, n=4)
        print(
            f"APF on / APF off by {label}: median {statistics.median(values):.3f}x, "
            f"quartiles {q1:.3f}-{q3:.3f}, min-max {min(values):.3f}-{max(values):.3f}"
        )


def ratio(a: list[float], b: list[float]) -> str:
    rs = [x / y for x, y in zip(a, b, strict=True)]
    return f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})"


def table(results: dict[str, dict[str, list[float]]], base: str) -> str:
    med = statistics.median
    lines = [
        "| variant | req/s (median, min-max) | p50 ms | p99 ms | c4 p50 ms | added c4 p50 ms "
        f"| vs {base} | CPU us/req | capacity vs {base} (CPU) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        added = [a - b for a, b in zip(r["lat50"], results["direct"]["lat50"], strict=True)]
        lines.append(
            f"| {name} | {med(r['rps']):.0f} ({min(r['rps']):.0f}-{max(r['rps']):.0f}) "
            f"| {med(r['p50']):.2f} | {med(r['p99']):.2f} | {med(r['lat50']):.2f} "
            f"| {med(added):+.2f} | {ratio(r['rps'], results[base]['rps'])} "
            f"| {med(r['cpu']):.0f} | {ratio(results[base]['cpu'], r['cpu'])} |"
        )
    return "\n".join(lines)


IN_PROCESS = """
import asyncio, sys, time, uvloop
from gateway.asgi.health import Phase
from gateway.server import Gateway
from gateway.settings.sources import load_config

mode, concurrency = sys.argv[1], int(sys.argv[2])
HEADERS = [(b"host", b"x"), (b"user-agent", b"wrk"), (b"accept", b"*/*")]
PATH = "/api/v1/namespaces/default/pods"

async def inner(scope, receive, send):
    await asyncio.sleep(0)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
inner.adds_response_headers = True

async def sent(message): pass
async def receive(): return {"type": "http.request", "body": b"", "more_body": False}

async def main():
    overrides = {"upstreams": [{"url": "http://127.0.0.1:1"}],
                 "enablePriorityAndFairness": mode != "off"}
    gw = Gateway(load_config([], overrides), loop=asyncio.get_running_loop())
    gw.endpoints.app = inner
    gw.lifecycle.phase = Phase.READY
    if mode != "off":
        gw.flow_control._app_adds_headers = True
    if mode == "nocore":  # the core's work replaced by no-ops: what the shell alone costs
        from gateway.flowcontrol import admission, queueset
        class Started:
            state, reason, start_time = queueset.EXECUTING, "", 0.0
        c = gw.controller
        c.start = lambda *a, **k: Started()
        c.finish = lambda *a, **k: None
        c.kinds.add = lambda *a, **k: None
        admission.Admission.release = lambda self: None
    n = 20000
    async def worker(k):
        for _ in range(k):
            await gw({"type": "http", "method": "GET", "path": PATH, "raw_path": PATH.encode(),
                      "query_string": b"", "headers": HEADERS, "client": ("127.0.0.1", 5),
                      "scheme": "http"}, receive, sent)
    await asyncio.gather(*(worker(50) for _ in range(concurrency)))
    best = 1e9
    for _ in range(7):
        t = time.perf_counter()
        await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
        best = min(best, (time.perf_counter() - t) / n)
    print(f"{best * 1e6:.2f}")

uvloop.run(main())
"""


def in_process(rounds: int) -> None:
    """Microseconds per request through the gateway app with a trivial inner app, no sockets:
    APF off, APF on with the core stubbed out (the shell's own cost), APF on."""
    for concurrency in (1, 32):
        got: dict[str, list[float]] = {"off": [], "nocore": [], "on": []}
        for _ in range(rounds):
            for mode, values in got.items():
                out = subprocess.run(
                    [PY, "-c", IN_PROCESS, mode, str(concurrency)],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                values.append(float(out))
        cells = ", ".join(
            f"{m} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for m, v in got.items()
        )
        print(f"{concurrency:>2} in flight, us/request median (min-max): {cells}")


def compiled_tree() -> Path:
    """A copy of this tree built with the compiled hot path (setup.py)."""

    return build_tree(Path(tempfile.mkdtemp(prefix="bench-compiled-")) / "tree", PY)


def run_pairs(args: argparse.Namespace, up: int, impl: tuple[str, ...]) -> int:
    tree = compiled_tree() if args.compiled else ROOT
    off_port, on_port = free_port(), free_port()
    with (
        process([PY, "-c", UPSTREAM_APP, str(up)], up),
        process(gateway_args(off_port, up, *OFF, *impl), off_port, tree),
        process(gateway_args(on_port, up, *impl), on_port, tree),
    ):
        print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, "
              f"{'compiled' if args.compiled else 'interpreted'} build, wrk -t1 -c32 "
              f"-d{args.duration}s, {args.pairs} ABBA pairs")  # fmt: skip
        paired((off_port, on_port), args.pairs, args.duration)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument(
        "--transports", action="store_true", help="compare upstream transports instead (APF off)"
    )
    parser.add_argument(
        "--compiled", action="store_true",
        help="also run APF off/on from a copy built with the compiled hot path (setup.py)",
    )  # fmt: skip
    parser.add_argument(
        "--in-process", action="store_true",
        help="per-request cost of the gateway app without sockets: APF off / shell / on",
    )  # fmt: skip
    parser.add_argument(
        "--http-implementation", choices=("zttp", "httptools"),
        help="the gateway's uvicorn HTTP/1.1 implementation (default: the gateway's default)",
    )  # fmt: skip
    parser.add_argument(
        "--pairs", type=int, default=0,
        help="instead: only APF off and on (compiled with --compiled), this many short ABBA "
        "pairs of --duration seconds, and the median of the per-pair ratios",
    )  # fmt: skip
    args = parser.parse_args()
    impl = ("--http-implementation", args.http_implementation) if args.http_implementation else ()
    if args.in_process:
        in_process(args.rounds)
        return 0
    up = free_port()
    if args.pairs:
        return run_pairs(args, up, impl)
    names = (
        ["direct", "h1", "aiohttp", "httpx-aiohttp", "httpx"]
        if args.transports
        else ["direct", "nginx", "apf-off", "apf-on"]
    )
    ports = {n: free_port() for n in names}
    ports["direct"] = up
    variants: dict[str, contextlib.AbstractContextManager[None]] = {
        "direct": contextlib.nullcontext()
    }
    if args.transports:
        for t in names[1:]:
            variants[t] = process(
                gateway_args(ports[t], up, *OFF, "--proxy-transport", t, *impl),
                ports[t],
            )
    else:
        variants["nginx"] = nginx(ports["nginx"], up)
        variants["apf-off"] = process(
            gateway_args(ports["apf-off"], up, *OFF, *impl), ports["apf-off"]
        )
        variants["apf-on"] = process(gateway_args(ports["apf-on"], up, *impl), ports["apf-on"])
        if args.compiled:
            tree = compiled_tree()
            for name, extra in (("apf-off-compiled", (*OFF, *impl)), ("apf-on-compiled", impl)):
                ports[name] = free_port()
                variants[name] = process(gateway_args(ports[name], up, *extra), ports[name], tree)
    with process([PY, "-c", UPSTREAM_APP, str(up)], up):
        results = run(variants, ports, args.rounds, args.duration)
    print()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, wrk -t1 -c32 -d{args.duration}s"
        f", {args.rounds} interleaved rounds"
    )
    print(table(results, "direct" if args.transports else "nginx"))
    if not args.transports:
        print(f"\nAPF on / APF off: {ratio(results['apf-on']['rps'], results['apf-off']['rps'])}")
        print(f"APF on / nginx:   {ratio(results['apf-on']['rps'], results['nginx']['rps'])}")
        on, off, ngx = (results[k]["cpu"] for k in ("apf-on", "apf-off", "nginx"))
        print(f"CPU per request, APF off / APF on (capacity ratio): {ratio(off, on)}")
        print(f"CPU per request, nginx / APF on (capacity ratio):   {ratio(ngx, on)}")
        if args.compiled:
            con, coff = (results[k] for k in ("apf-on-compiled", "apf-off-compiled"))
            print(f"compiled: APF on / APF off: {ratio(con['rps'], coff['rps'])}")
            plain_off = results["apf-off"]["rps"]
            print(f"compiled: APF on / APF off (interpreted): {ratio(con['rps'], plain_off)}")
            print(f"compiled: CPU per request, APF off / APF on: {ratio(coff['cpu'], con['cpu'])}")
            print(f"compiled: APF on / nginx: {ratio(con['rps'], results['nginx']['rps'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
