"""Front-door cost in instructions per request (callgrind): APF off, APF on, and the PF headers.

Run by hand (needs ``valgrind`` from Debian):

    .venv/bin/python bench/bench_instructions.py --rounds 3
    .venv/bin/python bench/bench_instructions.py --rounds 3 --baseline-tree <old checkout>

Throughput on these shared machines moves by 20% between runs, far more than the few percent
APF is meant to cost; instruction counts do not (repeat runs agree within ~0.5%). Each gateway
variant runs under ``valgrind --tool=callgrind`` with instrumentation switched on only around a
fixed number of requests (after a warm-up), in front of the same trivial upstream; the count is
the gateway process's own instructions, divided by the requests.

Variants:
- ``apf-off``: the max-in-flight filter;
- ``apf-on``: the suggested configuration;
- ``apf-on, access log off`` (trees that have the access log, which is on by default and
  writes to the benchmark's log file): the difference to ``apf-on`` is what the access log
  costs;
- ``apf-on, no PF headers``: a measurement-only copy of the tree whose proxy does not add the
  two ``X-Kubernetes-PF-*`` response headers (not a shipped option: Kubernetes always sends
  them). The difference to ``apf-on`` is what the two headers cost in the server's response
  path; the difference to ``apf-off`` is what admission costs.

Instructions are not time: code that misses the instruction cache or mispredicts branches
(cold, branchy code such as admission) takes more cycles per instruction than a tight loop.
``--cache-sim`` adds valgrind's cache and branch simulation and counts KCachegrind's cycle
estimate instead. Neither is an exact throughput ratio; read the split. Under callgrind the
server runs ~50x slower, so work done once per interval of wall time would be charged to ~50x
fewer requests; every variant therefore runs with ``listLearningInterval: 1h``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_frontdoor import (
    OFF,
    PATH,
    PY,
    ROOT,
    UPSTREAM_APP,
    free_port,
    gateway_args,
    process,
    wait_port,
)

from gateway.compiled import build_tree

# The one line of the proxy that hands the PF headers to the response (see without_pf_headers),
# as this tree and older ones (a baseline) spell it.
RELAYS = (
    "await self._relay(resp, send, added_headers(scope), watch)",
    "await self._relay(resp, receive, send, added_headers(scope), watch)",
)
SETTINGS = """apiVersion: gateway.apf.dev/v1alpha1
kind: GatewayConfiguration
workEstimation:
  listLearningInterval: 1h
"""


def without_pf_headers(tree: Path, dest: Path) -> Path:
    """A copy of ``tree`` whose proxy relays responses without the PF headers (measurement
    only); fails loudly if the proxy no longer has the line this edits."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(tree / "gateway", dest / "gateway", ignore=ignore)
    shutil.copytree(tree / "config", dest / "config", ignore=ignore)
    for shared in tree.glob("*__mypyc*"):  # the compiled build's shared library
        shutil.copy2(shared, dest / shared.name)
    app = dest / "gateway" / "proxy" / "app.py"
    source = app.read_text()
    relay = next((line for line in RELAYS if source.count(line) == 1), None)
    if relay is None:
        raise RuntimeError(f"{app}: expected one of the lines {RELAYS!r} once; update this "
                           "benchmark")  # fmt: skip
    without = relay.replace("added_headers(scope),", "None,")
    app.write_text(source.replace(relay, without))
    return dest


def variants_of(
    tree: Path, bare_dest: Path, impl: tuple[str, ...]
) -> tuple[tuple[str, Path, tuple[str, ...]], ...]:
    """(name, tree, extra server arguments) of the three variants measured for ``tree``."""
    bare = without_pf_headers(tree, bare_dest)
    variants: tuple[tuple[str, Path, tuple[str, ...]], ...] = (
        ("apf-off", tree, (*OFF, *impl)),
        ("apf-on", tree, impl),
        ("apf-on, no PF headers", bare, impl),
    )
    if (tree / "gateway" / "accesslog").is_dir():  # a tree with the access log (on by default)
        variants += (("apf-on, access log off", tree, (*impl, "--access-log=false")),)
    return variants


def compile_checkout(checkout: Path, dest: Path) -> Path:
    """``checkout`` built with the compiled hot path into ``dest``, by that checkout's own
    ``build_tree`` (which copies the sources next to the ``gateway`` package it is imported
    from, so another checkout has to import it in a process of its own)."""
    if checkout == ROOT:
        return build_tree(dest, PY)
    code = "import sys; from pathlib import Path; from gateway.compiled import build_tree; "
    code += "build_tree(Path(sys.argv[1]), sys.executable)"
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run([PY, "-c", code, str(dest)], cwd=checkout, env=env, check=True)
    return dest


async def client(port: int, requests: int, connections: int) -> int:
    """Exactly ``requests`` keep-alive GETs over ``connections``; returns how many got 200."""
    request = f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    ok = 0

    async def one(count: int) -> None:
        nonlocal ok
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(count):
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            ok += head.startswith(b"HTTP/1.1 200 ")
        writer.close()

    share, rest = divmod(requests, connections)
    await asyncio.gather(*(one(share + (i < rest)) for i in range(connections)))
    return ok


def control(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True)


def cycle_estimate(events: dict[str, float]) -> float:
    """KCachegrind's cycle estimate: Ir + 10 Bm + 10 L1m + 100 LLm (mispredicted branches,
    first-level and last-level cache misses, simulated by valgrind for its default caches)."""
    branch = events["Bcm"] + events["Bim"]
    l1 = events["I1mr"] + events["D1mr"] + events["D1mw"]
    ll = events["ILmr"] + events["DLmr"] + events["DLmw"]
    return events["Ir"] + 10 * branch + 10 * l1 + 100 * ll


def measure(tree: Path, extra: tuple[str, ...], args: argparse.Namespace, work: Path) -> float:
    """Instructions (or, with ``--cache-sim``, estimated cycles) per request."""
    up, port = free_port(), free_port()
    out = work / f"callgrind.{port}"
    sim = ("--cache-sim=yes", "--branch-sim=yes") if args.cache_sim else ()
    cmd = [
        "valgrind", "--tool=callgrind", *sim, "--instr-atstart=no", f"--callgrind-out-file={out}",
        *gateway_args(port, up, "--config", str(work / "settings.yaml"), *extra),
    ]  # fmt: skip
    with process([PY, "-c", UPSTREAM_APP, str(up)], up):
        # A fixed string-hash seed: dict probe sequences (and so their cache misses) then do
        # not differ from one process to the next.
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        log = work / f"gateway.{port}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=sink, stderr=sink)
        try:
            try:
                wait_port(port, timeout=180)
            except RuntimeError:
                raise RuntimeError(f"{' '.join(cmd)}:\n{log.read_text()[-3000:]}") from None
            asyncio.run(client(port, args.warmup, args.connections))
            control(proc.pid, "-i", "on")
            done = asyncio.run(client(port, args.requests, args.connections))
            control(proc.pid, "-i", "off")
            control(proc.pid, "-d")  # writes <out>.1
        finally:
            proc.terminate()
            proc.wait(60)
    if done != args.requests:
        raise RuntimeError(f"{done} of {args.requests} requests got 200")
    lines = out.with_name(f"{out.name}.1").read_text().splitlines()
    names = next(line for line in lines if line.startswith("events:")).split()[1:]
    totals = next(line for line in lines if line.startswith("totals:")).split()[1:]
    events = {n: int(v) / args.requests for n, v in zip(names, totals, strict=True)}
    return cycle_estimate(events) if args.cache_sim else events["Ir"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--build", choices=("interpreted", "compiled", "both"), default="both",
        help="which build to measure: this checkout, a copy built with the compiled hot path "
        "(setup.py), or both (default)",
    )  # fmt: skip
    parser.add_argument(
        "--http-implementation", choices=("zttp", "httptools"),
        help="the gateway's uvicorn HTTP/1.1 implementation (default: the gateway's default)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-sim", action="store_true",
        help="count estimated cycles instead of instructions: valgrind's cache and branch "
        "simulation, weighted as KCachegrind does (about 2x slower)",
    )  # fmt: skip
    parser.add_argument(
        "--compiled-tree", type=Path,
        help="measure this already compiled tree (from gateway.compiled.build_tree) "
        "instead of building one",
    )  # fmt: skip
    parser.add_argument(
        "--baseline-tree", type=Path,
        help="a checkout of another commit (git worktree add --detach), measured in the same "
        "run: its rounds interleave with this checkout's, and a before / after table follows",
    )  # fmt: skip
    parser.add_argument(
        "--keep", action="store_true",
        help="keep the work directory with every callgrind profile, for callgrind_annotate",
    )  # fmt: skip
    args = parser.parse_args()
    impl = ("--http-implementation", args.http_implementation) if args.http_implementation else ()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("needs valgrind (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    (work / "settings.yaml").write_text(SETTINGS)
    # side ("" for this checkout alone, or "before" / "after") -> build -> tree
    sides: dict[str, dict[str, Path]] = {}
    checkouts = {"before": args.baseline_tree, "after": ROOT} if args.baseline_tree else {"": ROOT}
    for side, checkout in checkouts.items():
        trees = sides[side] = {}
        if args.build != "compiled":
            trees["interpreted"] = checkout
        if args.build != "interpreted":
            if checkout == ROOT and args.compiled_tree:
                trees["compiled"] = args.compiled_tree
            else:
                trees["compiled"] = compile_checkout(checkout, work / f"tree-{side or 'this'}")
    started = time.monotonic()
    print(f"HTTP implementation: {args.http_implementation or 'the default'}")
    print(f"Python {sys.version.split()[0]}, {args.requests} requests over "
          f"{args.connections} connections after {args.warmup} warm-up, path {PATH}")  # fmt: skip
    unit = "estimated cycles" if args.cache_sim else "instructions"
    for build in sides[next(iter(sides))]:
        variants = {
            side: variants_of(trees[build], work / f"no-pf-headers-{build}-{side or 'this'}", impl)
            for side, trees in sides.items()
        }
        results: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
        for _ in range(args.rounds):
            for side in sides:  # the sides alternate within each round
                for name, where, extra in variants[side]:
                    value = measure(where, extra, args, work)
                    results[side].setdefault(name, []).append(value)
        medians = {
            side: {name: statistics.median(values) for name, values in by_name.items()}
            for side, by_name in results.items()
        }
        for side, median in medians.items():
            off, on, bare_on = median["apf-off"], median["apf-on"], median["apf-on, no PF headers"]
            label = f"{build}, {side}" if side else build
            print(f"\n| variant ({label}) | {unit} per request | APF off / variant |")
            print("|---|---|---|")
            for name, value in median.items():
                values = results[side][name]
                spread = f" ({min(values):,.0f}-{max(values):,.0f})" if args.rounds > 1 else ""
                print(f"| {name} | {value:,.0f}{spread} | {off / value:.3f}x |")
            print(f"admission: {bare_on - off:+,.0f} per request; "
                  f"the two PF headers in the server: {on - bare_on:+,.0f}")  # fmt: skip
        if args.baseline_tree:
            before, after = medians["before"], medians["after"]
            print(f"\n| {build} | before | after | after / before |\n|---|---|---|---|")
            for name in before:
                print(f"| {name} | {before[name]:,.0f} | {after[name]:,.0f} | "
                      f"{after[name] / before[name]:.3f}x |")  # fmt: skip
            print(f"| APF on / off | {before['apf-off'] / before['apf-on']:.3f}x | "
                  f"{after['apf-off'] / after['apf-on']:.3f}x | |")  # fmt: skip
    if args.keep:
        print(f"profiles kept in {work} (callgrind.<port>.1, one per measurement)")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
