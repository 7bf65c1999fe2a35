"""Per-activation logs from a container's output files (local backend agent ``logs``).

The runtime writes ``SENTINEL`` as the last line on stdout and stderr after every init and
run, before it sends the HTTP response, so by the time the router has the response the
activation's lines are in the files: ``take()`` reads what is new, up to the next sentinel on
each stream, without waiting. Lines are timestamped when read (docker's log driver does the
same at arrival). With C > 1 overlapping runs interleave: attribution is best effort.

Bounds: reading and splitting run in a worker thread (inline when at most ``INLINE_BYTES``
are unread, the usual case: a bounded step), in linear time
(``gateway.runtime.logsplit``), keeping at most ``limits.logs`` per activation, so an action
that prints 50 MB costs one pass over the file, not the event loop. When the backend opened
the files for appending (agent ``logs.append``), a file whose consumed part exceeds
``REWIND_BYTES`` is emptied once the container is idle, so it does not grow for the
container's whole life (output a background thread writes in that instant is lost: it
belongs to no activation).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import IO

from gateway.runtime.logsplit import Part, StreamSplitter, merge

CHUNK = 1024 * 1024
REWIND_BYTES = 1024 * 1024
INLINE_BYTES = 64 * 1024  # at most this much unread output is split on the event loop


class _Tail:
    def __init__(self, path: str, name: str, appending: bool) -> None:
        self.path = path
        self.name = name
        self.appending = appending
        self.file: IO[bytes] | None
        try:
            self.file = open(path, "rb")  # noqa: SIM115 - kept open for the container's life
            self.file.seek(0, 2)
        except OSError:
            self.file = None
        self.splitter = StreamSplitter(None)

    def take(self, max_bytes: int | None, at: float) -> Part:
        """The next activation's part: read up to its sentinel, or what is there at EOF."""
        splitter = self.splitter
        splitter.max_bytes = max_bytes
        while not splitter.done and self.file is not None:
            try:
                chunk = self.file.read(CHUNK)
            except (OSError, ValueError):  # closed meanwhile (the container went away)
                break
            if not chunk:
                break
            splitter.feed(chunk, at)
        if splitter.done:
            return splitter.done.popleft()
        return splitter.flush(at)  # no sentinel (the run failed): whatever it wrote

    def rewind(self) -> None:
        """Empty the file once everything in it was consumed (see the module docstring)."""
        f = self.file
        if f is None or not self.appending or self.splitter.done or not self.splitter.idle:
            return
        with contextlib.suppress(OSError, ValueError):
            consumed = f.tell()
            if consumed >= REWIND_BYTES and os.fstat(f.fileno()).st_size == consumed:
                os.truncate(self.path, 0)
                f.seek(0)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class ContainerLogs:
    def __init__(self, stdout: str, stderr: str, *, appending: bool = False) -> None:
        self._streams = (
            _Tail(stdout, "stdout", appending),
            _Tail(stderr, "stderr", appending),
        )
        self._lock = asyncio.Lock()

    async def take(
        self, max_bytes: int | None, *, limit: int | None = None, idle: bool = False
    ) -> list[str]:
        """One activation's lines, at most ``max_bytes`` plus the truncation line (naming
        ``limit``, default ``max_bytes``). ``idle``: no other activation is running in the
        container, so its files may be rewound."""
        async with self._lock:  # one reader at a time per container
            if self._unread() <= INLINE_BYTES:  # the usual few lines: cheaper than a thread hop
                return self._take(max_bytes, limit, idle)
            return await asyncio.to_thread(self._take, max_bytes, limit, idle)

    def _unread(self) -> int:
        total = 0
        for stream in self._streams:
            f = stream.file
            if f is not None:
                with contextlib.suppress(OSError, ValueError):
                    total += os.fstat(f.fileno()).st_size - f.tell()
        return total

    def _take(self, max_bytes: int | None, limit: int | None, idle: bool) -> list[str]:
        at = time.time()
        parts = [(s.name, s.take(max_bytes, at)) for s in self._streams]
        if idle:
            for stream in self._streams:
                stream.rewind()
        return merge(parts, max_bytes, at, limit)

    def close(self) -> None:
        for stream in self._streams:
            stream.close()


class NoLogs:
    async def take(
        self, max_bytes: int | None, *, limit: int | None = None, idle: bool = False
    ) -> list[str]:
        return []

    def close(self) -> None:
        pass
