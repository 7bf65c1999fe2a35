"""Splitting one output stream of a runtime into per-activation lines, in linear time and
bounded memory (pure: bytes in, lines out; the readers in ``router.logs`` and
``runtime.logs`` do the I/O).

The runtime ends the output of every init and run with ``SENTINEL`` as the last line of each
stream. ``StreamSplitter.feed`` scans each chunk once with ``bytes.find``: every byte is
copied at most once into a kept line or the partial-line buffer, never re-sliced per line
(the old ``buffer.split(b"\\n", 1)`` loop copied the rest of the buffer per line: quadratic).

Each activation keeps at most ``max_bytes`` of lines, counted as they are stored (timestamp,
stream name, text: ``LINE_OVERHEAD`` plus the text's bytes), as OpenWhisk's ``limits.logs``
counts each log record. Once a line would exceed it, that line and the rest of the
activation's output are dropped (only the tail needed to recognise a sentinel split over
two chunks is held) and the part is marked truncated; the next activation starts clean.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass, field

from gateway.runtime import SENTINEL

#: OpenWhisk's text when an activation's logs exceed ``limits.logs``.
TRUNCATED = "Logs were truncated because the total bytes size exceeds the limit of {} bytes."
#: ``2024-01-01T00:00:00.000000Z stdout: `` in front of every stored line.
LINE_OVERHEAD = 36

_SENTINEL = SENTINEL.encode()
_SENTINEL_LINE = _SENTINEL + b"\n"
_TAIL = len(_SENTINEL_LINE) - 1  # what dropping keeps: a sentinel line's longest proper prefix


def format_line(at: float, stream: str, text: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{stamp}.{int(at % 1 * 1_000_000):06d}Z {stream}: {text}"


def truncation_line(at: float, max_bytes: int) -> str:
    """The marker, as OpenWhisk stores it: one more stderr line."""
    return format_line(at, "stderr", TRUNCATED.format(max_bytes))


@dataclass(slots=True)
class Part:
    """One activation's lines on one stream: (arrival time, text), and whether some were
    dropped for the limit."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    truncated: bool = False
    size: int = 0  # bytes counted against the limit


class StreamSplitter:
    """``feed`` chunks of one stream; completed activations queue up in ``done``.

    ``copied`` counts the bytes copied into lines and buffers: at most twice the input plus
    a sentinel's length per chunk, whatever the line lengths (the linear-time guarantee).
    """

    def __init__(self, max_bytes: int | None) -> None:
        self.max_bytes = max_bytes
        self.current = Part()
        self.done: deque[Part] = deque()
        self._partial = bytearray()  # an unfinished line (kept mode) or a tail (dropping)
        self.copied = 0

    def feed(self, chunk: bytes, at: float) -> None:
        start = 0
        end = len(chunk)
        while start < end:
            if self.current.truncated:
                start = self._skip(chunk, start)
                continue
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._hold(chunk, start, end)
                return
            if self._partial:
                self._partial += chunk[start:nl]
                self.copied += nl - start + len(self._partial)
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = chunk[start:nl]
                self.copied += nl - start
            start = nl + 1
            self._line(line, at)

    def flush(self, at: float) -> Part:
        """At EOF: what is left of the current activation (an unfinished line included)."""
        if self._partial and not self.current.truncated:
            self._line(bytes(self._partial), at, final=True)
        self._partial.clear()
        part, self.current = self.current, Part()
        return part

    @property
    def idle(self) -> bool:
        """Nothing held between activations: no partial line, no lines since the sentinel."""
        return not self._partial and not self.current.lines and not self.current.truncated

    # ---- internals ---------------------------------------------------------------------
    def _line(self, line: bytes, at: float, *, final: bool = False) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not final and line.endswith(_SENTINEL):
            before = line[: -len(_SENTINEL)]
            if before:  # the action printed without a trailing newline
                self._keep(before, at)
            self._finish()
            return
        self._keep(line, at)

    def _keep(self, text: bytes, at: float) -> None:
        part = self.current
        size = LINE_OVERHEAD + len(text)
        if self.max_bytes is not None and part.size + size > self.max_bytes:
            part.truncated = True
            return
        part.size += size
        part.lines.append((at, text.decode(errors="replace")))

    def _finish(self) -> None:
        self.done.append(self.current)
        self.current = Part()

    def _hold(self, chunk: bytes, start: int, end: int) -> None:
        """Keep an unfinished line, unless it alone would break the limit: then drop it."""
        room = None if self.max_bytes is None else self.max_bytes - self.current.size
        if room is not None and LINE_OVERHEAD + len(self._partial) + (end - start) > room:
            self.current.truncated = True
            keep = _TAIL - (end - start)
            tail = bytes(self._partial[-keep:]) if keep > 0 else b""
            self._partial.clear()
            self._tail(tail + chunk[max(start, end - _TAIL) : end])
            return
        self._partial += chunk[start:end]
        self.copied += end - start

    def _tail(self, data: bytes) -> None:
        """Dropping: hold only the bytes that could begin a sentinel line."""
        self._partial[:] = data[-_TAIL:]
        self.copied += min(len(data), _TAIL)

    def _skip(self, chunk: bytes, start: int) -> int:
        """Dropping mode: find the sentinel line without looking at the lines before it;
        the index in ``chunk`` after it, or ``len(chunk)`` when it is not there yet."""
        if self._partial:  # a sentinel line may begin in the held tail
            head = chunk[start : start + _TAIL]
            held = len(self._partial)
            window = bytes(self._partial) + head
            self.copied += len(window)
            self._partial.clear()
            found = window.find(_SENTINEL_LINE)
            if 0 <= found < held:
                self._finish()
                return start + found + len(_SENTINEL_LINE) - held
        found = chunk.find(_SENTINEL_LINE, start)
        if found >= 0:
            self._finish()
            return found + len(_SENTINEL_LINE)
        self._tail(chunk[max(start, len(chunk) - _TAIL) :])
        return len(chunk)


def merge(
    parts: list[tuple[str, Part]], max_bytes: int | None, at: float, limit: int | None = None
) -> list[str]:
    """Both streams' parts of one activation as stored lines, in arrival order (each
    stream's own order kept even if the clock stepped back), within ``max_bytes`` in total;
    the truncation line last if anything was dropped, naming ``limit`` (default
    ``max_bytes``: the part of the limit left may be smaller than the limit)."""
    truncated = any(part.truncated for _, part in parts)
    tagged = [[(t, name, text) for t, text in part.lines] for name, part in parts]
    merged = heapq.merge(*tagged, key=lambda e: e[0])
    total = sum(part.size for _, part in parts)
    out: list[str] = []
    if max_bytes is None or total <= max_bytes:
        out = [format_line(t, name, text) for t, name, text in merged]
    else:  # each stream kept its own limit; together they may still exceed it
        used = 0
        for t, name, text in merged:
            used += LINE_OVERHEAD + len(text.encode())
            if used > max_bytes:
                truncated = True
                break
            out.append(format_line(t, name, text))
    if truncated and max_bytes is not None:
        out.append(truncation_line(at, max_bytes if limit is None else limit))
    return out
