"""Router side: split an action runtime's stdout/stderr into per-activation log lists.

Whoever starts a runtime must keep reading both pipes (this class does): the runtime writes at
least a sentinel line per request, and a full pipe blocks it.

The runtime ends the output of every init and every run with ``SENTINEL`` on both streams
(as OpenWhisk runtimes do). ``ActivationLogs`` reads the two pipes of the runtime process and
hands out one list per init/run, in order, with lines formatted as OpenWhisk stores them::

    2024-01-01T00:00:00.000000Z stdout: some text

Timestamps are taken when the line arrives here (docker's log driver does the same). The
caller must consume one list per request it sent, init included, in the order they were sent.

Each activation keeps at most ``max_bytes`` of lines (``limits.logs``); the rest of its output
is read and dropped up to its sentinel (``gateway.runtime.logsplit``), so neither a chatty
action nor one endless line makes this buffer grow, and the pipes are always drained.

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
import time
from collections.abc import Callable

from gateway.runtime.logsplit import TRUNCATED, Part, StreamSplitter, format_line, merge

__all__ = ["TRUNCATED", "ActivationLogs", "RuntimeStartError", "format_line", "read_listening"]

CHUNK = 256 * 1024


class RuntimeStartError(Exception):
    """The runtime exited or printed something else before ``LISTENING <port>``."""


async def read_listening(stdout: asyncio.StreamReader) -> int:
    line = (await stdout.readline()).decode(errors="replace").strip()
    name, _, port = line.partition(" ")
    if name != "LISTENING" or not port.isdigit():
        raise RuntimeStartError(f"expected 'LISTENING <port>' from the runtime, got {line!r}")
    return int(port)


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
        self._streams = (
            ("stdout", StreamSplitter(max_bytes)),
            ("stderr", StreamSplitter(max_bytes)),
        )
        self._eof = [False, False]
        self._changed = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._pump(reader, i)) for i, reader in enumerate((stdout, stderr))
        ]

    async def _pump(self, reader: asyncio.StreamReader, index: int) -> None:
        splitter = self._streams[index][1]
        try:
            while chunk := await reader.read(CHUNK):
                before = len(splitter.done)
                splitter.feed(chunk, self._now())
                if len(splitter.done) != before:
                    self._changed.set()
        finally:
            self._eof[index] = True
            self._changed.set()

    def _ready(self) -> bool:
        return all(s.done or eof for (_, s), eof in zip(self._streams, self._eof, strict=True))

    async def next(self) -> list[str]:
        """The lines of the next init/run; at EOF, whatever is left (possibly nothing)."""
        while not self._ready():
            self._changed.clear()
            await self._changed.wait()
        now = self._now()
        parts: list[tuple[str, Part]] = []
        for name, splitter in self._streams:
            parts.append((name, splitter.done.popleft() if splitter.done else splitter.flush(now)))
        return merge(parts, self._max_bytes, now)

    @property
    def closed(self) -> bool:
        """Both pipes reached EOF (the runtime exited)."""
        return all(self._eof)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
