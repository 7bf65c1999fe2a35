"""Router memory and event-loop stall under tenant-sized bodies and results (issue 21). Run by
hand:

    .venv/bin/python bench/bench_router_sizes.py [--baseline-tree /work/main] [--mb 60]

Each case runs against a fresh manager + router (real processes on 127.0.0.1, SQLite store).
While the case's request runs, one thread polls the router's ``/livez`` back to back (its
slowest answer is the stall a lease renewal would see) and another samples the router's RSS
from ``/proc`` every 5 ms (the peak, and the RSS after the case). With ``--baseline-tree PATH``
(a checkout of another commit) the same cases run on that tree first, in the same run.

Cases: a ``--mb`` MB action PUT with ``Content-Length``; the same chunked; a ``--mb`` MB
chunked invoke; a legal action of 45 MB of escape-heavy code (parsed and stored); an action
returning a ``--mb`` MB result (blocking invoke); listing two such activations.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

IDENTITY = {"X-Remote-User": "bench", "X-Remote-Extra-Namespace": "guest"}
BIG_RESULT = "def main(args):\n    return {'x': 'a' * (args['mb'] * 1024 * 1024)}\n"


def start(args: list[str], log: Path, tree: str | None) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m gateway`` from ``tree`` (default: this checkout). The working directory
    comes first on ``sys.path`` with ``-m``, so it is the tree itself, not only PYTHONPATH."""
    root = tree or str(Path(__file__).resolve().parent.parent)
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": root},
            cwd=root,
        )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("LISTENING"):
        raise SystemExit(f"{args[0]} did not start, see {log}")
    return proc, line.split()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def request(
    url: str, method: str, path: str, body: bytes | Iterator[bytes] | None = None
) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    headers = {
        **IDENTITY,  # as the front door forwards it: identity with the internal token
        "Authorization": "Bearer " + os.environ["APF_INTERNAL_TOKEN"],
        "Content-Type": "application/json",
    }
    if body is not None and not isinstance(body, bytes):
        headers["Transfer-Encoding"] = "chunked"
    try:
        conn.request(method, path, body=body, headers=headers, encode_chunked=True)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (ConnectionError, http.client.HTTPException) as exc:
        return 0, str(exc).encode()
    finally:
        conn.close()


def chunks(total: int, size: int = 256 * 1024) -> Iterator[bytes]:
    yield b'{"x": "'
    sent = 0
    while sent < total:
        yield b"y" * size
        sent += size
    yield b'"}'


class Watch:
    """``/livez`` latency and RSS of ``pid`` while a case runs."""

    def __init__(self, url: str, pid: int) -> None:
        self.url, self.pid = url, pid
        self.stop = threading.Event()
        self.livez: list[float] = []
        self.rss: list[float] = []

    def _poll(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        while not self.stop.is_set():
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            t0 = time.perf_counter()
            conn.request("GET", "/livez")
            conn.getresponse().read()
            self.livez.append((time.perf_counter() - t0) * 1000)
            conn.close()

    def _sample(self) -> None:
        while not self.stop.is_set():
            self.rss.append(rss_mb(self.pid))
            time.sleep(0.005)  # the sampling interval

    def run(self, case: Callable[[], str]) -> dict[str, Any]:
        before = rss_mb(self.pid)
        threads = [threading.Thread(target=f) for f in (self._poll, self._sample)]
        for t in threads:
            t.start()
        time.sleep(0.2)  # a few quiet polls first
        t0 = time.perf_counter()
        answer = case()
        took = time.perf_counter() - t0
        time.sleep(0.2)
        self.stop.set()
        for t in threads:
            t.join()
        return {
            "answer": answer,
            "seconds": took,
            "rss_before": before,
            "rss_peak": max(self.rss),
            "rss_after": rss_mb(self.pid),
            "livez_max_ms": max(self.livez),
        }


def cases(mb: int) -> dict[str, Callable[[str], str]]:
    action = "/api/v1/namespaces/_/actions/"
    big = json.dumps({"exec": {"kind": "python:3", "code": "x" * (mb << 20)}}).encode()
    escaped = json.dumps({"exec": {"kind": "python:3", "code": '#"\n' * (9 << 20)}}).encode()

    def put(url: str) -> str:
        return str(request(url, "PUT", action + "big?overwrite=true", big)[0])

    def put_chunked(url: str) -> str:
        body = iter([big[i : i + (256 << 10)] for i in range(0, len(big), 256 << 10)])
        return str(request(url, "PUT", action + "big?overwrite=true", body)[0])

    def invoke_chunked(url: str) -> str:
        return str(request(url, "POST", action + "echo?blocking=true", chunks(mb << 20))[0])

    def put_escaped(url: str) -> str:
        return f"{request(url, 'PUT', action + 'escaped?overwrite=true', escaped)[0]}"

    def result(url: str) -> str:
        status, body = request(url, "POST", action + "result?blocking=true", b'{"mb": %d}' % mb)
        return f"{status}, {len(body) >> 10} KiB"

    def listing(url: str) -> str:
        for _ in range(2):
            request(url, "POST", action + "result?blocking=true", b'{"mb": %d}' % mb)
        status, body = request(url, "GET", "/api/v1/namespaces/_/activations?limit=2")
        return f"{status}, {len(body) >> 10} KiB"

    return {
        f"PUT {mb} MB (Content-Length)": put,
        f"PUT {mb} MB chunked": put_chunked,
        f"invoke {mb} MB chunked": invoke_chunked,
        "PUT 45 MB body (27 MB escape-heavy code)": put_escaped,
        f"{mb} MB result": result,
        f"list 2 activations of {mb} MB results": listing,
    }


def run_case(root: Path, tree: str | None, name: str, case: Callable[[str], str]) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(dir=root))
    manager, murl = start(
        ["manager", "serve", "--listen", "127.0.0.1:0", "--state-dir", str(state / "s")],
        state / "manager.log",
        tree,
    )
    router, rurl = start(
        [
            *("router", "--listen", "127.0.0.1:0", "--manager", murl, "--id", "bench"),
            *("--store", f"sqlite:///{state / 'db.sqlite'}"),
        ],
        state / "router.log",
        tree,
    )
    try:
        for action, code in (("echo", "def main(a):\n    return a\n"), ("result", BIG_RESULT)):
            body = json.dumps({"exec": {"kind": "python:3", "code": code}}).encode()
            request(rurl, "PUT", f"/api/v1/namespaces/_/actions/{action}", body)
        request(rurl, "POST", "/api/v1/namespaces/_/actions/result?blocking=true", b'{"mb": 0}')
        return Watch(rurl, router.pid).run(lambda: case(rurl))
    finally:
        for proc in (router, manager):
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-tree", default=None)
    parser.add_argument("--mb", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("APF_INTERNAL_TOKEN", secrets.token_urlsafe(32))
    trees = [("baseline", args.baseline_tree)] if args.baseline_tree else []
    trees.append(("this tree", None))
    print("| case | tree | answer | s | RSS before / peak / after (MB) | slowest /livez (ms) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases(args.mb).items():
            for label, tree in trees:
                r = run_case(Path(tmp), tree, name, case)
                print(
                    f"| {name} | {label} | {r['answer']} | {r['seconds']:.2f} | "
                    f"{r['rss_before']:.0f} / {r['rss_peak']:.0f} / {r['rss_after']:.0f} | "
                    f"{r['livez_max_ms']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
