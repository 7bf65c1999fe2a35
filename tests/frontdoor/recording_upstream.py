"""An upstream on a raw socket that records each request head byte for byte.

No HTTP library sits between the gateway and the record, so a test sees exactly the request
line and header names the proxy sent (a library would normalise both).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest


@dataclass
class Received:
    method: str
    target: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


@dataclass
class RecordingUpstream:
    sock: socket.socket
    received: list[Received] = field(default_factory=list)
    reply_headers: bytes = b""  # extra response header lines, each ending in CRLF
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buf = b""
        with conn:
            while not self._stop.is_set():
                try:
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buf += chunk
                except OSError:
                    return
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _version = lines[0].split(" ", 2)
                headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:]]
                self.received.append(Received(method, target, headers))  # type: ignore[arg-type]
                length = 0
                for k, v in headers:
                    if k.lower() == "content-length":
                        length = int(v)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n" + self.reply_headers + b"\r\nok"
                )

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def recorder() -> Iterator[RecordingUpstream]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    up = RecordingUpstream(sock)
    thread = threading.Thread(target=up.serve, daemon=True)
    thread.start()
    yield up
    up.stop()
    thread.join(5)


def raw_request(port: int, head: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    """Send one request head as given (no client library to clean the path) and read the
    response to the end (the request asks the server to close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split(b" ")[1]), body


def get(port: int, target: str, *headers: str, method: str = "GET") -> tuple[int, bytes]:
    extra = "".join(f"{h}\r\n" for h in headers)
    head = f"{method} {target} HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n"
    return raw_request(port, head.encode("latin-1"))
