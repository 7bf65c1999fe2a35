"""The access log's writer: a bounded queue the event loop appends to, drained by one thread.

The event loop only puts an entry on a ``queue.SimpleQueue`` (C, no Python lock): formatting
and writing happen in the thread, which blocks on the queue until an entry comes (no periodic
wake-up, so an idle or disabled log costs nothing) and then, after ``batch_interval``, takes
everything queued behind it as one batch; ``close`` queues a stop mark. A full queue drops the
entry and counts it, so a slow disk or a stdout pipe nobody reads never delays a request; a
failed write drops its lines (counted, and logged once per failure streak). Each batch is
written with ``os.write`` in pieces that end on a line, so lines are never split by other
writers of the same file.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from queue import Empty, SimpleQueue
from typing import Final

from gateway.accesslog.fields import Entry, LineFormat, formatter

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


class _Mark:
    """A queue item that is not an entry: the stop mark, or the reopen mark (SIGUSR1)."""


STOP: Final = _Mark()
REOPEN: Final = _Mark()


class AccessLogWriter:
    def __init__(
        self,
        fd: int,
        *,
        format: str,
        queue_size: int,
        flush_timeout: float,
        path: str = STDOUT,
        batch_interval: float = 0.05,
    ) -> None:
        self.fd = fd
        self.path = path  # reopened on SIGUSR1 unless it is standard output
        self.format: LineFormat = formatter(format)
        self.queue_size = queue_size
        self.flush_timeout = flush_timeout
        # After the first entry of a batch the thread waits this long for more (nginx's
        # ``buffer``/``flush``): one wake-up and one write per interval under load, not one
        # per request. An idle log still costs nothing: the wait starts only with an entry.
        self.batch_interval = batch_interval
        self.queue: SimpleQueue[Entry | _Mark] = SimpleQueue()
        # bound once: a call on the event loop without a method look-up each time (compiled)
        self._put = self.queue.put
        self._qsize = self.queue.qsize
        self.dropped = 0  # counted on the event loop (queue full) and in the thread (write)
        self.written = 0
        self.reopened = 0
        self._failing = False
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()  # orders the two ``dropped`` writers

    @classmethod
    def open(
        cls, path: str, *, format: str, queue_size: int, flush_timeout: float
    ) -> AccessLogWriter:
        return cls(
            open_path(path), format=format, queue_size=queue_size, flush_timeout=flush_timeout,
            path=path,
        )  # fmt: skip

    def submit(self, entry: Entry) -> None:
        """On the event loop: queue ``entry``, or drop it when the queue is full."""
        if self._qsize() >= self.queue_size:
            with self._lock:
                self.dropped += 1
            return
        self._put(entry)

    def reopen(self) -> None:
        """SIGUSR1 (nginx's semantics, for logrotate without ``copytruncate``): the lines
        queued before it go to the file open now, the ones after it to ``path`` opened anew.
        The thread does it between two writes, so no line is lost or written twice."""
        if self.path != STDOUT:
            self.queue.put(REOPEN)  # past the size bound: a mark is not a line

    def start(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="access-log", daemon=True)
            self._worker.start()

    def close(self) -> None:
        """Write what is queued (waiting at most ``flush_timeout``), then close the file."""
        worker = self._worker
        if worker is not None:
            self.queue.put(STOP)
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
        interval = self.batch_interval
        while True:
            first = queue.get()
            if first is not STOP and interval > 0:
                time.sleep(interval)  # the batching wait (see __init__)
            if self._drain(first):
                return

    def _drain(self, first: Entry | _Mark | None) -> bool:
        """Write ``first`` and everything queued behind it, in order; True when the stop mark
        was among them."""
        take = self.queue.get_nowait  # bound once per batch, not looked up per line
        fmt = self.format
        # Entries carry perf_counter readings (no wall-clock call on the event loop); one
        # offset per batch turns them into wall-clock time.
        wall = time.time() - time.perf_counter()
        lines: list[str] = []
        size = 0
        item: Entry | _Mark | None = first
        while True:
            if item is None:
                try:
                    item = take()
                except Empty:
                    break
            if isinstance(item, Entry):
                item.started += wall
                try:
                    line = fmt(item)
                except Exception:
                    log.exception("access log: an entry could not be formatted")
                    self._drop(1)
                    item = None
                    continue
                item = None
                lines.append(line)
                size += len(line) + 1
                if size >= CHUNK:
                    self._write(lines)
                    lines = []
                    size = 0
            else:
                if lines:
                    self._write(lines)
                    lines = []
                    size = 0
                if item is STOP:
                    return True
                item = None
                self._reopen()
        if lines:
            self._write(lines)
        return False

    def _write(self, lines: list[str]) -> None:
        count = len(lines)
        lines.append("")
        data = "\n".join(lines).encode("utf-8", "replace")
        try:
            view = memoryview(data)
            while view:
                # two statements: mypyc 2.x evaluates ``view[os.write(fd, view):]``'s start
                # twice, writing every line twice
                n = os.write(self.fd, view)
                view = view[n:]
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

    def _reopen(self) -> None:
        try:
            fd = open_path(self.path)
        except OSError as exc:
            log.warning("access log: reopening %s failed, writing on to the old file: %s",
                        self.path, exc)  # fmt: skip
            return
        old = self.fd
        self.fd = fd
        os.close(old)
        self.reopened += 1
        log.info("access log: reopened %s", self.path)

    def _drop(self, count: int) -> None:
        with self._lock:
            self.dropped += count
