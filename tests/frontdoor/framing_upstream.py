"""An HTTP/1.1 upstream on a raw asyncio server that records what it parsed on each connection.

It parses with llhttp like a real server, so bytes the proxy leaves on a kept-alive connection
(the rest of a body that never came, an overlong response's tail) are read exactly as a real
upstream would read them, and a test can prove which requests reached it and on which
connection. Behaviour by path prefix:

- ``/early``: answers as soon as the head is parsed, before the body (like a router that
  refuses early), and keeps parsing the connection;
- ``/overlong``: ``Content-Length: 5`` followed by more bytes than that: a whole second
  response (``/overlong-full``) or the start of one (``/overlong-partial``) in the same
  write, or a whole one 0.2 s later (``/overlong-late``), when the connection is idle;
- ``/cut/<n>``: ``Content-Length: 2n``, sends ``n`` bytes, then closes (``/cut``) or stalls;
  ``/stall/<n>`` stalls with the connection open;
- ``/big/<n>``: a body of ``n`` bytes;
- anything else: answers ``"<METHOD> <path>"`` once the whole request arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httptools


@dataclass
class Parsed:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: int = 0
    complete: bool = False


@dataclass
class UpConn:
    requests: list[Parsed] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    closed: bool = False
    late_sent: bool = False
    client_cn: str = ""  # the TLS client certificate's CN


class _Protocol(asyncio.Protocol):
    def __init__(self, record: UpConn) -> None:
        self.record = record
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[str, str]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peercert")
        if peer:
            self.record.client_cn = dict(x[0] for x in peer["subject"])["commonName"]

    def data_received(self, data: bytes) -> None:
        self.record.raw += data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.record.closed = True

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        method = self.parser.get_method().decode()
        req = Parsed(method, self.url.decode("latin-1"), self.headers)
        self.record.requests.append(req)
        if req.path.startswith("/early"):
            self._answer(req)

    def on_body(self, body: bytes) -> None:
        self.record.requests[-1].body += len(body)

    def on_message_complete(self) -> None:
        req = self.record.requests[-1]
        req.complete = True
        if not req.path.startswith("/early"):
            self._answer(req)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _late(self, data: bytes) -> None:
        self._write(data)
        self.record.late_sent = True

    def _answer(self, req: Parsed) -> None:
        parts = req.path.strip("/").split("/")
        kind = parts[0]
        if kind.startswith("overlong"):
            fake = b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nsmuggle"
            if kind == "overlong-partial":
                fake = b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\nsmug"
            hello = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
            if kind == "overlong-late":  # once the proxy had time to pool the connection
                self._write(hello)
                asyncio.get_running_loop().call_later(0.2, self._late, fake)
            else:
                self._write(hello + fake)
        elif kind in ("cut", "stall"):
            n = int(parts[1])
            self._write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (2 * n) + b"x" * n)
            if kind == "cut" and self.transport is not None:
                self.transport.close()
        elif kind == "big":
            n = int(parts[1])
            self._write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % n + b"b" * n)
        else:
            body = f"{req.method} {req.path}".encode()
            self._write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))


class RecordingUpstream:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.conns: list[UpConn] = []
        self.port = 0
        self.tls = tls

    def requests(self) -> list[Parsed]:
        return [r for c in list(self.conns) for r in list(c.requests)]

    def conn_of(self, path_prefix: str) -> list[UpConn]:
        return [
            c for c in list(self.conns) if any(r.path.startswith(path_prefix) for r in c.requests)
        ]

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"


@contextlib.contextmanager
def recording_upstream(tls: ssl.SSLContext | None = None) -> Iterator[RecordingUpstream]:
    """``tls``: serve HTTPS with this context (each connection records the client's CN)."""
    up = RecordingUpstream(tls)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = loop.create_future()

    protocols: list[_Protocol] = []

    def make() -> _Protocol:
        record = UpConn()
        up.conns.append(record)
        protocols.append(_Protocol(record))
        return protocols[-1]

    async def serve() -> None:
        server = await loop.create_server(make, "127.0.0.1", 0, ssl=tls)
        up.port = server.sockets[0].getsockname()[1]
        ready.set()
        await stop
        server.close()
        for p in protocols:
            if p.transport is not None:
                p.transport.close()
        await server.wait_closed()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield up
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(5)
        loop.close()
