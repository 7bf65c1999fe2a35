"""A minimal threaded HTTP/1.1 server: one thread per connection, keep-alive, JSON bodies.

Why not uvicorn or asyncio: a cold start pays for every import, and ``asyncio`` alone costs
about as much as the rest of the runtime (``bench/bench_runtime.py`` compares the three). The
action runtime serves one client (its router) over a handful of keep-alive connections, so a
blocking thread per connection is both the simplest and the fastest shape; a sync ``main``
runs right in the connection's thread.

Authentication: when ``serve_forever`` is given the container's secret, every request must
carry ``Authorization: Bearer <secret>`` (compared in constant time) or it gets 401 without
reaching the handler, so a stranger can neither ``/init`` nor ``/run`` nor add sentinel lines
to the activation logs.

Supported: ``Content-Length`` and chunked request bodies, ``Expect: 100-continue``,
keep-alive (HTTP/1.1 default, ``Connection: close`` honoured). Responses always carry
``Content-Length``.

Graceful stop (``Stopping`` raised in the accepting thread, by the SIGTERM handler of
``__main__``): the listening socket closes at once, requests already being handled finish,
requests arriving later on kept-alive connections get 503, and ``serve_forever`` returns once
nothing is in flight. The container's grace period (SIGKILL after it) bounds the wait.
"""

from __future__ import annotations

import hmac
import socket
import sys
import threading
from collections.abc import Callable
from io import BufferedReader

#: ``handler(method, path, body) -> (status, json_body)``
Handler = Callable[[str, str, bytes], tuple[int, bytes]]

MAX_LINE = 65536
MAX_HEADERS = 100
MAX_BODY = 64 * 1024 * 1024

_REASONS = {
    200: b"OK",
    401: b"Unauthorized",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    411: b"Length Required",
    413: b"Payload Too Large",
    500: b"Internal Server Error",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
}
STOPPING_BODY = b'{"error": "The action runtime is shutting down."}'
UNAUTHORIZED_BODY = (
    b'{"error": "Missing or wrong container secret: send Authorization: Bearer <secret>."}'
)


class Stopping(Exception):
    """Raised (by a signal handler) in the thread running ``serve_forever``."""


class _InFlight:
    """Requests being handled; once ``stopping`` no new one is admitted."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.count = 0
        self.stopping = False

    def enter(self) -> bool:
        with self.cond:
            if self.stopping:
                return False
            self.count += 1
            return True

    def leave(self) -> None:
        with self.cond:
            self.count -= 1
            self.cond.notify_all()

    def drain(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.wait_for(lambda: self.count == 0)


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def listen(host: str, port: int) -> socket.socket:
    return socket.create_server((host, port), backlog=128)


def serve_forever(sock: socket.socket, handler: Handler, secret: bytes | None = None) -> None:
    """Serve until ``Stopping`` is raised here; then drain (see the module docstring)."""
    in_flight = _InFlight()
    expected = b"Bearer " + secret if secret else None
    try:
        while True:
            conn, _ = sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=_serve_connection, args=(conn, handler, in_flight, expected), daemon=True
            ).start()
    except Stopping:
        sock.close()
        in_flight.drain()


def _serve_connection(
    conn: socket.socket,
    handler: Handler,
    in_flight: _InFlight | None = None,
    expected: bytes | None = None,
) -> None:
    rfile = conn.makefile("rb")
    try:
        while True:
            try:
                request = _read_request(rfile, conn)
            except BadRequest as exc:
                body = b'{"error": "%s"}' % str(exc).replace('"', "'").encode()
                conn.sendall(_response(exc.status, body, keep_alive=False))
                return
            if request is None:
                return
            method, path, body, keep_alive, auth = request
            if expected is not None and not hmac.compare_digest(auth, expected):
                conn.sendall(_response(401, UNAUTHORIZED_BODY, keep_alive=keep_alive))
                if not keep_alive:
                    return
                continue
            if in_flight is not None and not in_flight.enter():
                conn.sendall(_response(503, STOPPING_BODY, keep_alive=False))
                return
            try:
                status, payload = handler(method, path, body)
            except Exception as exc:  # a bug in the runtime itself: answer, keep serving
                status, payload = 500, b'{"error": "Internal error in the action runtime."}'
                sys.stderr.write(f"action runtime: internal error: {exc!r}\n")
            try:
                conn.sendall(_response(status, payload, keep_alive=keep_alive))
            finally:
                if in_flight is not None:
                    in_flight.leave()
            if not keep_alive:
                return
    except OSError:
        return  # the client went away
    finally:
        rfile.close()
        conn.close()


def _response(status: int, body: bytes, *, keep_alive: bool) -> bytes:
    head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (
        status,
        _REASONS.get(status, b"Unknown"),
        len(body),
    )
    if not keep_alive:
        head += b"Connection: close\r\n"
    return head + b"\r\n" + body


def _readline(rfile: BufferedReader) -> bytes:
    line = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise BadRequest(400, "request line or header too long")
    return line


def _read_request(
    rfile: BufferedReader, conn: socket.socket
) -> tuple[str, str, bytes, bool, bytes] | None:
    """Parse one request; None when the client closed the connection between requests."""
    line = _readline(rfile)
    while line in (b"\r\n", b"\n"):
        line = _readline(rfile)
    if not line:
        return None
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    headers: dict[bytes, bytes] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _readline(rfile)
        if line in (b"\r\n", b"\n", b""):
            break
        name, sep, value = line.partition(b":")
        if not sep:
            raise BadRequest(400, "malformed header line")
        headers[name.strip().lower()] = value.strip()
    else:
        raise BadRequest(400, "too many headers")
    connection = headers.get(b"connection", b"").lower()
    keep_alive = connection != b"close" if version == b"HTTP/1.1" else connection == b"keep-alive"
    if headers.get(b"expect", b"").lower() == b"100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        body = _read_chunked(rfile)
    else:
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            raise BadRequest(400, "invalid Content-Length") from None
        if length < 0:
            raise BadRequest(400, "invalid Content-Length")
        if length > MAX_BODY:
            raise BadRequest(413, f"request body larger than {MAX_BODY} bytes")
        body = rfile.read(length) if length else b""
        if len(body) != length:
            return None
    path = target.split(b"?", 1)[0].decode("latin-1")
    auth = headers.get(b"authorization", b"")
    return method.decode("latin-1"), path, body, keep_alive, auth


def _read_chunked(rfile: BufferedReader) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        size_line = _readline(rfile).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise BadRequest(400, "malformed chunk size") from None
        if size == 0:
            while _readline(rfile) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        total += size
        if total > MAX_BODY:
            raise BadRequest(413, f"request body larger than {MAX_BODY} bytes")
        chunks.append(rfile.read(size))
        _readline(rfile)
