"""HTTPS through the front door against nginx HTTPS: same certificate, same upstream, keep-alive.

Run by hand (needs ``wrk`` and ``nginx`` from Debian):

    .venv/bin/python bench/bench_tls.py --rounds 3 --duration 8

Variants, each one process with one worker in front of the same trivial upstream (the one
``bench_frontdoor.py`` uses), interleaved in rounds: nginx HTTPS (``listen ssl``, upstream
keepalive pool), the gateway over HTTPS (APF on, the default configuration), and the gateway
over plain HTTP for the TLS cost on our side. The certificate is an ECDSA P-256 leaf from a test
CA made here. ``wrk -t1 -c32`` keeps its connections alive, so this measures the record layer
(encryption per request), not handshakes. wrk, the variant and the upstream share the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_frontdoor import (
    PATH,
    PIDS,
    PY,
    UPSTREAM_APP,
    cpu_seconds,
    free_port,
    nginx,
    process,
    ratio,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.certs import issue, make_ca  # noqa: E402 - after the path is set


def wrk(url: str, port: int, duration: float) -> tuple[float, float]:
    """req/s and CPU microseconds per request of the serving process."""
    before = cpu_seconds(PIDS[port])
    out = subprocess.run(
        ["wrk", "-t1", "-c32", f"-d{max(1, round(duration))}s", url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    cpu = cpu_seconds(PIDS[port]) - before
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise RuntimeError(f"non-2xx responses from {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return rps, cpu / total * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    args = parser.parse_args()
    if not (shutil.which("wrk") and shutil.which("nginx")):
        print("needs wrk and nginx (apt-get install -y wrk nginx)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    ca = make_ca(work)
    leaf = issue(ca, work, "server", cn="bench", ips=("127.0.0.1",), usage="server")
    up = free_port()
    ports = {name: free_port() for name in ("nginx https", "gateway https", "gateway http")}
    urls = {
        "nginx https": f"https://127.0.0.1:{ports['nginx https']}{PATH}",
        "gateway https": f"https://127.0.0.1:{ports['gateway https']}{PATH}",
        "gateway http": f"http://127.0.0.1:{ports['gateway http']}{PATH}",
    }
    tls = ("--tls-cert-file", str(leaf.cert_file), "--tls-private-key-file", str(leaf.key_file))

    def serve(name: str, *extra: str) -> list[str]:
        listen = f"127.0.0.1:{ports[name]}"
        return [PY, "-m", "gateway", "serve", "--listen", listen, "--upstream",
                f"http://127.0.0.1:{up}", "--log-level", "warning", *extra]  # fmt: skip

    results: dict[str, dict[str, list[float]]] = {n: {"rps": [], "cpu": []} for n in ports}
    with contextlib.ExitStack() as stack:
        stack.enter_context(process([PY, "-c", UPSTREAM_APP, str(up)], up))
        stack.enter_context(nginx(ports["nginx https"], up, (leaf.cert_file, leaf.key_file)))
        stack.enter_context(process(serve("gateway https", *tls), ports["gateway https"]))
        stack.enter_context(process(serve("gateway http"), ports["gateway http"]))
        for name, port in ports.items():
            wrk(urls[name], port, 1)  # warm-up
        for _ in range(args.rounds):
            for name, port in ports.items():
                rps, cpu = wrk(urls[name], port, args.duration)
                results[name]["rps"].append(rps)
                results[name]["cpu"].append(cpu)
    shutil.rmtree(work, ignore_errors=True)
    print(f"Python {sys.version.split()[0]}, wrk -t1 -c32 -d{args.duration}s, "
          f"{args.rounds} interleaved rounds, keep-alive")  # fmt: skip
    print("| variant | req/s (median) | CPU us/request (median) |")
    print("|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {statistics.median(r['rps']):.0f} | {statistics.median(r['cpu']):.0f} |")
    g, n, h = (results[k] for k in ("gateway https", "nginx https", "gateway http"))
    print(f"gateway https / nginx https (req/s): {ratio(g['rps'], n['rps'])}")
    print(f"gateway https / gateway http (req/s): {ratio(g['rps'], h['rps'])}")
    print(f"CPU per request, gateway https / gateway http: {ratio(g['cpu'], h['cpu'])}")
    print(f"CPU per request, nginx https / gateway https (capacity): {ratio(n['cpu'], g['cpu'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
