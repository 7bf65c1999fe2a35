"""Connections and keep-alive pools for the ``h1`` transport (see ``h1_transport``).

``Conn`` is an ``asyncio.Protocol`` that feeds llhttp (httptools) and keeps one exchange's
state; ``Pool`` hands out idle connections to one host:port, bounded for regular requests.

A connection goes back to the pool only when the exchange ended exactly as framed: the whole
request was written, the whole response read, nothing arrived after it, and both sides allow
keep-alive. Anything else closes it, because the next request's bytes would otherwise be read
in a stale framing context (request smuggling, or a response answering the wrong request).
"""

from __future__ import annotations

import asyncio
import collections
import time

import httptools

from gateway.proxy.transport import (
    Headers,
    Timeouts,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.proxy.upstream_tls import TLSTarget

# Body chunks buffered before the connection stops reading (back-pressure on the upstream).
HIGH_WATER = 64 * 1024


class _Unexpected(Exception):
    """A response started while none was expected (bytes after a complete response)."""


class Conn(asyncio.Protocol):
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.write_paused = False  # the socket's buffer is above its high-water mark
        self.idle_since = 0.0
        # Done once the transport has closed its socket (``connection_lost``): what a stop
        # waits for, as a transport still closing when the loop stops leaves it open.
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: Headers = []
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: Exception | None = None
        self.headers_done: asyncio.Future[None] = self.loop.create_future()
        self.waiter: asyncio.Future[None] | None = None
        self.last_read = time.monotonic()
        self.paused = False
        self.received = False  # any response bytes since this request was written
        self.reused = False  # taken from the idle pool (the upstream may have closed it)
        self.expecting = True  # a final response is due; cleared when it completes
        self.sent_all = False  # the whole request, as framed, was handed to the socket
        self.drain_waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.pool.conns.add(self)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_writer()

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.complete:
                # Bytes after a complete response (longer than its Content-Length, or
                # unsolicited while idle): keep what was framed, never reuse the connection.
                self.keep_alive = False
                self.close()
            else:
                self._fail(UpstreamProtocolError(f"malformed upstream response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and exc is None and self._ends_at_eof():
            # A body without length or chunking ends when the upstream closes (RFC 9112 6.3).
            self.complete = True
            self.keep_alive = False
            self._wake()
        if not self.complete:
            self._fail(UpstreamProtocolError(f"upstream closed the connection: {exc or 'EOF'}"))
        self._wake_writer()
        self.pool.forget(self)
        if not self.lost.done():
            self.lost.set_result(None)

    # httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        if not self.expecting:
            raise _Unexpected

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.headers = []  # interim response (103 Early Hints, ...): wait for the final one
            return
        self.status = status
        if not self.headers_done.done():
            self.headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.status:
            return  # the end of an interim response
        self.complete = True
        self.expecting = False
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()
        if self.drain_waiter is not None:
            self._wake_writer()  # an early, complete answer: the rest of the body is not needed

    # helpers ---------------------------------------------------------------------------
    def _ends_at_eof(self) -> bool:
        if not self.headers_done.done() or self.error is not None:
            return False
        return not any(
            name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value)
            for name, value in self.headers
        )

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _wake_writer(self) -> None:
        w = self.drain_waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
        if not self.headers_done.done():
            self.headers_done.set_exception(exc)
            self.headers_done.exception()  # mark retrieved; the sender re-raises it
        self._wake()
        self._wake_writer()
        self.close()

    @property
    def reusable(self) -> bool:
        return (
            self.sent_all
            and self.complete
            and self.keep_alive
            and not self.closed
            and self.error is None
        )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            if self.pool.tls is None:
                self.transport.close()
            else:
                # No TLS close_notify exchange (up to 30 s with the socket open): a closed
                # upstream connection is done with, framed or in doubt, and HTTP/1.1 framing
                # never relies on close_notify.
                self.transport.abort()

    def abort(self, exc: Exception) -> None:
        """Close now, unsent bytes dropped: an exchange still running fails with ``exc``
        (never taken for a body that ends at EOF)."""
        if not self.complete:
            self._fail(exc)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def take(self) -> bytes:
        data = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    async def wait_data(self, read_timeout: float | None) -> None:
        """Until a chunk arrives, the message completes or the read timeout passes."""
        while not self.chunks and not self.complete and self.error is None:
            self.waiter = self.loop.create_future()
            await with_read_timeout(self, self.waiter, read_timeout)
        if self.error is not None and not self.chunks:
            raise self.error

    async def drain(self, write_timeout: float | None) -> None:
        """Until the socket takes more (back-pressure on the client's upload), the response is
        complete, or the connection fails; an upstream that reads nothing for
        ``write_timeout`` seconds fails it with ``UpstreamTimeout``."""
        if not self.write_paused or self.complete or self.error is not None:
            return
        fut = self.drain_waiter = self.loop.create_future()
        timer = None
        if write_timeout is not None:
            timer = self.loop.call_later(
                write_timeout,
                self._fail,
                UpstreamTimeout(f"upstream read none of the request for {write_timeout:g}s"),
            )
        try:
            await fut
        finally:
            self.drain_waiter = None
            if timer is not None:
                timer.cancel()


async def with_read_timeout(
    conn: Conn, fut: asyncio.Future[None], read_timeout: float | None
) -> None:
    if read_timeout is None:
        await fut
        return
    loop = conn.loop
    timer: list[asyncio.TimerHandle] = []

    def check() -> None:
        idle = time.monotonic() - conn.last_read
        if fut.done():
            return
        if idle >= read_timeout:
            conn._fail(UpstreamTimeout(f"no data from upstream for {read_timeout:g}s"))
        else:
            timer[0] = loop.call_later(read_timeout - idle, check)

    timer.append(loop.call_later(read_timeout, check))
    try:
        await fut
    finally:
        timer[0].cancel()


class Pool:
    """Keep-alive connections to one host:port; ``limit`` 0 means unbounded."""

    def __init__(
        self, host: str, port: int, limit: int, t: Timeouts, expiry: float,
        tls: TLSTarget | None = None,
    ) -> None:  # fmt: skip
        self.loop = asyncio.get_running_loop()
        self.host, self.port = host, port
        self.tls = tls
        self.limit = limit
        self.timeouts = t
        self.expiry = expiry
        self.idle: list[Conn] = []
        self.conns: set[Conn] = set()  # every open connection, idle or in use
        self.closed = False
        self.active = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self) -> Conn:
        if self.closed:
            raise UpstreamConnectError(f"{self.host}:{self.port}: the gateway is stopping")
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if conn.closed or now - conn.idle_since > self.expiry:
                conn.close()
                continue
            self.active += 1
            conn._reset()
            conn.reused = True
            return conn
        if self.limit and self.active >= self.limit:
            fut = self.loop.create_future()
            self.waiters.append(fut)
            try:
                await asyncio.wait_for(fut, self.timeouts.pool)
            except TimeoutError as exc:
                raise UpstreamTimeout("no free upstream connection in the pool") from exc
            finally:
                if fut in self.waiters:
                    self.waiters.remove(fut)
            return await self.acquire()
        self.active += 1
        try:
            tls = self.tls
            if tls is None:
                coro = self.loop.create_connection(lambda: Conn(self), self.host, self.port)
            else:  # the connect timeout covers the handshake too
                coro = self.loop.create_connection(
                    lambda: Conn(self), self.host, self.port, ssl=tls.context,
                    server_hostname=tls.server_hostname,
                )  # fmt: skip
            _, proto = await asyncio.wait_for(coro, self.timeouts.connect)
        except TimeoutError as exc:
            self._released()
            raise UpstreamTimeout(f"connect to {self.host}:{self.port} timed out") from exc
        except OSError as exc:
            self._released()
            raise UpstreamConnectError(f"connect to {self.host}:{self.port}: {exc}") from exc
        except BaseException:
            self._released()
            raise
        return proto

    def release(self, conn: Conn) -> None:
        self._released()
        if not conn.reusable:
            conn.close()
        else:
            conn.idle_since = time.monotonic()
            self.idle.append(conn)

    def _released(self) -> None:
        self.active -= 1
        self._wake_one()

    def _wake_one(self) -> bool:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return True
        return False

    def resize(self, limit: int) -> None:
        """A new admitted concurrency: waiters that now fit go ahead; a smaller limit only
        stops new connections (busy ones finish, idle ones are kept)."""
        self.limit = limit
        room = len(self.waiters) if not limit else limit - self.active
        for _ in range(room):
            if not self._wake_one():
                break

    def forget(self, conn: Conn) -> None:
        self.conns.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> list[asyncio.Future[None]]:
        """Stop: every connection aborted, idle or in use (an exchange still running fails as
        if the upstream had gone); acquiring fails from now on. What to await for each
        connection's socket to be closed."""
        self.closed = True
        self.idle.clear()
        gone = UpstreamConnectError(f"{self.host}:{self.port}: the gateway is stopping")
        lost = []
        for conn in list(self.conns):
            conn.abort(gone)
            lost.append(conn.lost)
        while self._wake_one():  # a waiter's acquire now fails
            pass
        return lost
