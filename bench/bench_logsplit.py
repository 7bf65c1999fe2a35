"""Splitting an activation's output into lines: the old per-line ``split`` loop vs
``gateway.runtime.logsplit.StreamSplitter``.

    .venv/bin/python bench/bench_logsplit.py [--sizes 0.25,0.5,1,2] [--limit-mb 1]

Input: N MB of 100-byte lines then the sentinel. ``old`` is what ``router/logs.py`` did: read
the whole new part of the file, then ``buffer.split(b"\\n", 1)`` per line (each line copies the
rest of the buffer: quadratic); ``new`` is the splitter fed 1 MiB chunks (the router's read
size), without a limit and with ``--limit-mb`` (the rest dropped by ``bytes.find`` up to the
sentinel). Best of 3 per cell.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from gateway.runtime import SENTINEL
from gateway.runtime.logsplit import StreamSplitter

END = SENTINEL.encode()
CHUNK = 1024 * 1024


def old_split(chunks: list[bytes]) -> int:
    buffer = b""
    lines = 0
    for chunk in chunks:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.endswith(END):
                return lines
            line.decode(errors="replace")
            lines += 1
    return lines


def new_split(limit: int | None) -> Callable[[list[bytes]], int]:
    def run(chunks: list[bytes]) -> int:
        splitter = StreamSplitter(limit)
        for chunk in chunks:
            splitter.feed(chunk, 0.0)
        return len(splitter.done[0].lines)

    return run


def best(fn: Callable[[list[bytes]], int], chunks: list[bytes]) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn(chunks)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0.25,0.5,1,2", help="input sizes in MB")
    parser.add_argument("--limit-mb", type=float, default=1.0)
    args = parser.parse_args()
    limit = int(args.limit_mb * 1024 * 1024)
    print(f"{'MB':>6} {'old s':>9} {'new s':>9} {'new+limit s':>12} {'old/new':>8}")
    for mb in (float(x) for x in args.sizes.split(",")):
        data = (b"x" * 99 + b"\n") * int(mb * 1024 * 1024 / 100) + END + b"\n"
        chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
        old = best(old_split, [data])
        new = best(new_split(None), chunks)
        capped = best(new_split(limit), chunks)
        print(f"{mb:>6g} {old:>9.4f} {new:>9.4f} {capped:>12.4f} {old / new:>8.1f}")


if __name__ == "__main__":
    main()
