"""Router side: split an action runtime's stdout/stderr into per-activation log lists.

Whoever starts a runtime must keep reading both pipes (this class does): the runtime writes at
least a sentinel line per request, and a full pipe blocks it.

The runtime ends the output of every init and every run with ``SENTINEL`` on both streams
(as OpenWhisk runtimes do). ``ActivationLogs`` reads the two pipes of the runtime process and
hands out one list per init/run, in order, with lines formatted as OpenWhisk stores them::

    2024-01-01T00:00:00.000000Z stdout: some text

Timestamps are taken when the line arrives here (docker's log driver does the same). The
caller must consume one list per request it sent, init included, in the order they were sent.

With concurrency > 1 the sentinels of overlapping runs interleave, so lines cannot be
attributed reliably: the lists are then best effort (OpenWhisk does not split logs of
concurrent activations either).

Usage (the launcher reads ``LISTENING`` first, then hands the pipes over)::

    proc = await asyncio.create_subprocess_exec(..., stdout=PIPE, stderr=PIPE)
    port = await read_listening(proc.stdout)
    logs = ActivationLogs(proc.stdout, proc.stderr)
    ... POST /init ...; init_lines = await logs.next()
    ... POST /run  ...; run_lines = await logs.next()
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import deque
from collections.abc import Callable

from gateway.runtime import SENTINEL

_SENTINEL_BYTES = SENTINEL.encode()

#: OpenWhisk's text when an activation's logs exceed ``limits.logs``.
TRUNCATED = "Logs were truncated because the total bytes size exceeds the limit of {} bytes."


class RuntimeStartError(Exception):
    """The runtime exited or printed something else before ``LISTENING <port>``."""


async def read_listening(stdout: asyncio.StreamReader) -> int:
    line = (await stdout.readline()).decode(errors="replace").strip()
    name, _, port = line.partition(" ")
    if name != "LISTENING" or not port.isdigit():
        raise RuntimeStartError(f"expected 'LISTENING <port>' from the runtime, got {line!r}")
    return int(port)


def format_line(at: float, stream: str, text: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{stamp}.{int(at % 1 * 1_000_000):06d}Z {stream}: {text}"


class _Stream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.current: list[tuple[float, str]] = []
        self.done: deque[list[tuple[float, str]]] = deque()
        self.eof = False


class ActivationLogs:
    """Reads both pipes in background tasks; ``next()`` returns one activation's lines.

    ``max_bytes`` (``limits.logs`` in bytes) truncates each list as OpenWhisk does;
    ``now`` gives the wall-clock seconds used for the timestamps.
    """

    def __init__(
        self,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        *,
        max_bytes: int | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._now = now
        self._max_bytes = max_bytes
        self._streams = (_Stream("stdout"), _Stream("stderr"))
        self._changed = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._pump(reader, stream))
            for reader, stream in zip((stdout, stderr), self._streams, strict=True)
        ]

    async def _pump(self, reader: asyncio.StreamReader, stream: _Stream) -> None:
        try:
            while line := await reader.readline():
                text = line.rstrip(b"\r\n")
                if text.endswith(_SENTINEL_BYTES):
                    before = text[: -len(_SENTINEL_BYTES)]
                    if before:  # the action printed without a trailing newline
                        stream.current.append((self._now(), before.decode(errors="replace")))
                    stream.done.append(stream.current)
                    stream.current = []
                    self._changed.set()
                else:
                    stream.current.append((self._now(), text.decode(errors="replace")))
        except (ValueError, asyncio.LimitOverrunError):
            pass  # a line over the reader's limit: stop splitting rather than misattribute
        finally:
            stream.eof = True
            self._changed.set()

    def _ready(self) -> bool:
        return all(s.done or s.eof for s in self._streams)

    async def next(self) -> list[str]:
        """The lines of the next init/run; at EOF, whatever is left (possibly nothing)."""
        while not self._ready():
            self._changed.clear()
            await self._changed.wait()
        parts: list[list[tuple[float, str, str]]] = []
        for stream in self._streams:
            if stream.done:
                part = stream.done.popleft()
            else:
                part, stream.current = stream.current, []
            parts.append([(at, stream.name, text) for at, text in part])
        # merge keeps each stream's own order even if the wall clock steps back
        merged = heapq.merge(*parts, key=lambda e: e[0])
        return self._limit([format_line(at, name, text) for at, name, text in merged])

    def _limit(self, lines: list[str]) -> list[str]:
        if self._max_bytes is None:
            return lines
        kept: list[str] = []
        total = 0
        for line in lines:
            total += len(line.encode())
            if total > self._max_bytes:
                kept.append(TRUNCATED.format(self._max_bytes))
                break
            kept.append(line)
        return kept

    @property
    def closed(self) -> bool:
        """Both pipes reached EOF (the runtime exited)."""
        return all(s.eof for s in self._streams)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
