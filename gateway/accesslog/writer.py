"""The access log's writer: a bounded queue the event loop appends to, drained by one thread.

The event loop only puts an entry on a ``queue.SimpleQueue`` (C, no Python lock): formatting
and writing happen in the thread, which blocks on the queue until an entry comes (no periodic
wake-up, so an idle or disabled log costs nothing) and then takes everything queued behind it
as one batch; ``close`` queues a stop mark. A full queue drops the entry and counts it, so a slow
disk or a stdout pipe nobody reads never delays a request; a failed write drops its lines
(counted, and logged once per failure streak). Each batch is written with ``os.write`` in
pieces that end on a line, so lines are never split by other writers of the same file.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from queue import Empty, SimpleQueue
from typing import Final

from gateway.accesslog.fields import CombinedFormat, Entry, JsonFormat, formatter

log = logging.getLogger("gateway.accesslog")

STDOUT: Final = "-"
CHUNK: Final = 64 * 1024


def open_path(path: str) -> int:
    """A file descriptor for ``path`` ("-": standard output). Raises ``OSError``."""
    if path == STDOUT:
        sys.stdout.flush()
        return os.dup(sys.stdout.fileno())
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    return os.open(path, flags, 0o640)


class AccessLogWriter:
    def __init__(self, fd: int, *, format: str, queue_size: int, flush_timeout: float) -> None:
        self.fd = fd
        self.format: JsonFormat | CombinedFormat = formatter(format)
        self.queue_size = queue_size
        self.flush_timeout = flush_timeout
        self.queue: SimpleQueue[Entry | None] = SimpleQueue()  # None: the stop mark
        self.dropped = 0  # counted on the event loop (queue full) and in the thread (write)
        self.written = 0
        self._failing = False
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()  # orders the two ``dropped`` writers

    @classmethod
    def open(
        cls, path: str, *, format: str, queue_size: int, flush_timeout: float
    ) -> AccessLogWriter:
        return cls(
            open_path(path), format=format, queue_size=queue_size, flush_timeout=flush_timeout
        )

    def submit(self, entry: Entry) -> None:
        """On the event loop: queue ``entry``, or drop it when the queue is full."""
        if self.queue.qsize() >= self.queue_size:
            with self._lock:
                self.dropped += 1
            return
        self.queue.put(entry)

    def start(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="access-log", daemon=True)
            self._worker.start()

    def close(self) -> None:
        """Write what is queued (waiting at most ``flush_timeout``), then close the file."""
        worker = self._worker
        if worker is not None:
            self.queue.put(None)
            worker.join(self.flush_timeout)
            if worker.is_alive():
                log.warning(
                    "access log: %d lines not written within %gs at shutdown",
                    self.queue.qsize(), self.flush_timeout,
                )  # fmt: skip
                return  # the thread may still be writing to the descriptor
        else:
            self._drain(None)
        os.close(self.fd)

    def _run(self) -> None:
        queue = self.queue
        while True:
            first = queue.get()
            if first is None:
                self._drain(None)
                return
            if self._drain(first):
                return

    def _drain(self, entry: Entry | None) -> bool:
        """Write ``entry`` and all queued behind it; True when the stop mark was among them."""
        queue = self.queue
        stopped = False
        more = True
        # Entries carry perf_counter readings (one clock call fewer on the event loop); one
        # offset per batch turns them into wall-clock time.
        wall = time.time() - time.perf_counter()
        while more:
            lines: list[str] = []
            size = 0
            while size < CHUNK:
                if entry is None:
                    try:
                        entry = queue.get_nowait()
                    except Empty:
                        more = False
                        break
                    if entry is None:
                        stopped = True
                        continue
                entry.started += wall
                try:
                    line = self.format(entry)
                except Exception:
                    log.exception("access log: an entry could not be formatted")
                    self._drop(1)
                    entry = None
                    continue
                entry = None
                lines.append(line)
                size += len(line) + 1
            if lines:
                lines.append("")
                self._write("\n".join(lines).encode("utf-8", "replace"), len(lines) - 1)
        return stopped

    def _write(self, data: bytes, count: int) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self._drop(count)
            if not self._failing:
                log.warning("access log: writing failed, lines are dropped: %s", exc)
                self._failing = True
            return
        if self._failing:
            log.warning("access log: writing works again")
            self._failing = False
        self.written += count

    def _drop(self, count: int) -> None:
        with self._lock:
            self.dropped += count
