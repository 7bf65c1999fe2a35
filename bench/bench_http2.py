"""HTTP/2 vs HTTP/1.1 through the gateway, side by side in one run (h2load).

Run by hand (needs ``h2load`` from Debian's ``nghttp2-client``):

    .venv/bin/python bench/bench_http2.py --rounds 3 --duration 8

One gateway (``serve --http2-prior-knowledge true``, APF on, the suggested configuration) in
front of the trivial upstream of ``bench_frontdoor.py``; the same h2load drives it over
HTTP/1.1 (``--h1``, keep-alive) and over h2c with prior knowledge, interleaved per round:
``-c`` clients, and on HTTP/2 ``-m`` streams per connection. The gateway's CPU time per
request comes from /proc, as in ``bench_frontdoor.py``. Upstream stays HTTP/1.1 in both.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys

from bench_frontdoor import (
    PATH,
    PIDS,
    PY,
    UPSTREAM_APP,
    cpu_seconds,
    free_port,
    gateway_args,
    process,
)  # fmt: skip


def h2load(port: int, args: list[str], duration: int) -> tuple[float, float]:
    """req/s and the gateway's CPU microseconds per request."""
    before = cpu_seconds(PIDS[port])
    out = subprocess.run(
        ["h2load", "-D", str(duration), *args, f"http://127.0.0.1:{port}{PATH}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    cpu = cpu_seconds(PIDS[port]) - before
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", out).group(1))  # type: ignore[union-attr]
    ok = int(re.search(r"status codes: (\d+) 2xx", out).group(1))  # type: ignore[union-attr]
    assert ok == done, out
    rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1))  # type: ignore[union-attr]
    return rps, cpu * 1e6 / max(done, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--streams", type=int, default=8, help="HTTP/2 streams per connection")
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        print("needs h2load (apt-get install -y nghttp2-client)", file=sys.stderr)
        return 2
    up, gw = free_port(), free_port()
    c = str(args.clients)
    variants = {
        f"HTTP/1.1 (-c{c})": ["--h1", "-c", c],
        f"HTTP/2 (-c{c} -m1)": ["-c", c, "-m", "1"],
        f"HTTP/2 (-c{c} -m{args.streams})": ["-c", c, "-m", str(args.streams)],
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    with (
        process([PY, "-c", UPSTREAM_APP, str(up)], up),
        process(gateway_args(gw, up, "--http2-prior-knowledge", "true"), gw),
    ):
        h2load(gw, ["--h1", "-c", c], 2)  # warm-up
        for _ in range(args.rounds):
            for name, extra in variants.items():
                results[name].append(h2load(gw, extra, args.duration))
    base = statistics.median(r for r, _ in results[f"HTTP/1.1 (-c{c})"])
    print("| variant | req/s (median) | vs HTTP/1.1 | gateway CPU us/request |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        rps = statistics.median(r for r, _ in rows)
        cpu = statistics.median(u for _, u in rows)
        print(f"| {name} | {rps:,.0f} | {rps / base:.2f}x | {cpu:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
