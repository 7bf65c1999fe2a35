"""Per-activation logs from a container's output files (local backend agent ``logs``).

The runtime writes ``SENTINEL`` as the last line on stdout and stderr after every init and
run, before it sends the HTTP response, so by the time the router has the response the
activation's lines are in the files: ``take()`` reads what is new, up to the next sentinel on
each stream, without waiting. Lines are timestamped when read (docker's log driver does the
same at arrival). With C > 1 overlapping runs interleave: attribution is best effort.
"""

from __future__ import annotations

import contextlib
import time
from typing import IO

from gateway.runtime import SENTINEL
from gateway.runtime.logs import TRUNCATED, format_line

_SENTINEL = SENTINEL.encode()


class _Tail:
    def __init__(self, path: str, name: str) -> None:
        self.name = name
        self.file: IO[bytes] | None
        try:
            self.file = open(path, "rb")  # noqa: SIM115 - kept open for the container's life
            self.file.seek(0, 2)
        except OSError:
            self.file = None
        self.buffer = b""

    def take(self) -> list[str]:
        if self.file is not None:
            with contextlib.suppress(OSError, ValueError):
                self.buffer += self.file.read()
        lines: list[str] = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.endswith(_SENTINEL):
                before = line[: -len(_SENTINEL)]
                if before:
                    lines.append(before.decode(errors="replace"))
                return lines
            lines.append(line.decode(errors="replace"))
        return lines

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class ContainerLogs:
    def __init__(self, stdout: str, stderr: str) -> None:
        self._streams = (_Tail(stdout, "stdout"), _Tail(stderr, "stderr"))

    def take(self, max_bytes: int | None) -> list[str]:
        at = time.time()
        out: list[str] = []
        total = 0
        for stream in self._streams:
            for text in stream.take():
                line = format_line(at, stream.name, text)
                total += len(line)
                if max_bytes is not None and total > max_bytes:
                    out.append(TRUNCATED.format(max_bytes))
                    return out
                out.append(line)
        return out

    def close(self) -> None:
        for stream in self._streams:
            stream.close()


class NoLogs:
    def take(self, max_bytes: int | None) -> list[str]:
        return []

    def close(self) -> None:
        pass
