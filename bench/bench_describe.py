"""What describing a request costs before admission: the canonical-path check every request
pays, request-info parsing (paid once per distinct request: the describer caches it) and the
upstream header filter every proxied request pays.

Run by hand: ``.venv/bin/python bench/bench_describe.py [--rounds 5]``; results go to
``docs/performance.md`` ("Describing a request"). Each cell is timed in batches of process CPU
time; a round keeps the fastest batch, the table shows the median of the rounds (min-max) and
the ratio to the describer's cache hit measured in the same round (what every request already
paid before the canonical path existed).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from gateway.asgi.authn import RequestAuthenticator
from gateway.asgi.canonical import canonicalize
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.digest import ANONYMOUS
from gateway.proxy.headers import HeaderPolicy

HEADERS = [
    (b"host", b"gateway:8080"), (b"user-agent", b"kubectl/v1.30.0"),
    (b"accept", b"application/json"), (b"authorization", b"Bearer abc"),
    (b"accept-encoding", b"gzip"), (b"content-type", b"application/json"),
    (b"x-request-id", b"0f3c"), (b"connection", b"keep-alive"),
]  # fmt: skip
BATCH = 20_000
Cell = Callable[[], int]  # runs BATCH calls, returns the elapsed ns
PARSED = [
    ("GET", "/api/v1/namespaces/default/pods", b"limit=500"),
    ("GET", "/api/v1/namespaces/default/pods/p", b""),
    ("GET", "/apis/apps/v1/deployments", b"watch=1&fieldSelector=metadata.name%3Dx"),
    ("GET", "/v2/items", b"a=1"),
]


def scope(raw: bytes, path: str, query: bytes) -> dict[str, object]:
    # Fresh bytes objects, as a server hands over per request (their hashes are not cached).
    return {"type": "http", "method": "GET", "path": path, "raw_path": bytes(bytearray(raw)),
            "query_string": bytes(bytearray(query)), "headers": HEADERS,
            "client": ("127.0.0.1", 1)}  # fmt: skip


def each(make: Callable[[], dict[str, object]], fn: Callable[[Any], object]) -> Cell:
    """``fn`` over a new request per call, the requests built outside the timed part."""
    requests = [make() for _ in range(BATCH)]

    def cell() -> int:
        t0 = time.process_time_ns()
        for r in requests:
            fn(r)
        return time.process_time_ns() - t0

    return cell


def repeat(fn: Callable[[], object]) -> Cell:
    def cell() -> int:
        t0 = time.process_time_ns()
        for _ in range(BATCH):
            fn()
        return time.process_time_ns() - t0

    return cell


def cells() -> dict[str, Cell]:
    describer = RequestDescriber(RequestAuthenticator(), RequestInfoParser())
    pods = "/api/v1/namespaces/default/pods"
    describer.describe(scope(pods.encode(), pods, b"limit=5"))
    parser = RequestInfoParser()
    policy = HeaderPolicy(identity_headers=("X-Remote-User", "X-Remote-Group"))
    out: dict[str, Cell] = {
        "baseline: describer cache hit": each(
            lambda: scope(pods.encode(), pods, b"limit=5"), describer.describe
        ),
        "canonical path, already canonical": each(
            lambda: scope(pods.encode(), pods, b"limit=5"), canonicalize
        ),
        "canonical path, one escape to decode": each(
            lambda: scope(b"/api/v1/namespaces/%64efault/pods", pods, b""), canonicalize
        ),
        "upstream headers (8 request headers)": repeat(
            lambda: policy.request_headers(
                HEADERS, client_host="127.0.0.1", scheme="http", user=ANONYMOUS
            )
        ),
    }
    for method, path, query in PARSED:
        label = f"parse (cache miss) {path}" + (f"?{query.decode()}" if query else "")
        out[label] = repeat(lambda m=method, p=path, q=query: parser.parse(m, p, q))
    return out


def per_call_us(cell: Cell, batches: int = 5) -> float:
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(batches):
            best = min(best, cell() / BATCH / 1000)
    finally:
        gc.enable()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    table = cells()
    results: dict[str, list[float]] = {k: [] for k in table}
    ratios: dict[str, list[float]] = {k: [] for k in table}
    for _ in range(args.rounds):
        measured = {k: per_call_us(fn) for k, fn in table.items()}
        base = measured["baseline: describer cache hit"]
        for k, v in measured.items():
            results[k].append(v)
            ratios[k].append(v / base)
    print("| operation | per call, us: median (min-max of rounds) | x baseline |")
    print("|---|---|---|")
    for k, vs in results.items():
        print(f"| {k} | {statistics.median(vs):.2f} ({min(vs):.2f}-{max(vs):.2f}) "
              f"| {statistics.median(ratios[k]):.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
