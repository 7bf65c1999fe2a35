"""A lean HTTP/1.1 upstream client: ``asyncio.Protocol`` + the httptools (llhttp) parser.

Why it exists: a proxy pays its client's per-request overhead on every request, and the
general-purpose clients measured in ADR 0001 spend most of their time in request objects,
multidicts, hooks and timers the proxy never uses. This one does only what forwarding needs:
one keep-alive pool per upstream (bounded for regular requests, unbounded for long-running
ones), bytes in and bytes out, connect/read/pool timeouts, and errors mapped to
``UpstreamError``. Read timeouts are checked lazily (one timer per request, re-armed only when
it fires early), so a steady stream costs no timer churn.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

from gateway.proxy.transport import (
    SMALL_BODY,
    Headers,
    PoolLimits,
    Timeouts,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
)

# Body chunks buffered before the connection stops reading (back-pressure on the upstream).
HIGH_WATER = 256 * 1024


class _Conn(asyncio.Protocol):
    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
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

    # asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"malformed upstream response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            self._fail(UpstreamProtocolError(f"upstream closed the connection: {exc or 'EOF'}"))
        self.pool.forget(self)

    # httptools callbacks ---------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
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
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # helpers ---------------------------------------------------------------------------
    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
        if not self.headers_done.done():
            self.headers_done.set_exception(exc)
            self.headers_done.exception()  # mark retrieved; the sender re-raises it
        self._wake()
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

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
            await _with_read_timeout(self, self.waiter, read_timeout)
        if self.error is not None and not self.chunks:
            raise self.error


async def _with_read_timeout(
    conn: _Conn, fut: asyncio.Future[None], read_timeout: float | None
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


class _Pool:
    """Keep-alive connections to one host:port; ``limit`` 0 means unbounded."""

    def __init__(self, host: str, port: int, limit: int, t: Timeouts, expiry: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.host, self.port = host, port
        self.limit = limit
        self.timeouts = t
        self.expiry = expiry
        self.idle: list[_Conn] = []
        self.active = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self) -> _Conn:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if conn.closed or now - conn.idle_since > self.expiry:
                conn.close()
                continue
            self.active += 1
            conn._reset()
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
            coro = self.loop.create_connection(lambda: _Conn(self), self.host, self.port)
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

    def release(self, conn: _Conn) -> None:
        self._released()
        if conn.closed or not conn.complete or not conn.keep_alive or conn.error is not None:
            conn.close()
        else:
            conn.idle_since = time.monotonic()
            self.idle.append(conn)

    def _released(self) -> None:
        self.active -= 1
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                break

    def forget(self, conn: _Conn) -> None:
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class H1Response:
    __slots__ = ("_conn", "_pool", "_read_timeout", "_released", "body", "headers", "status")

    def __init__(self, conn: _Conn, pool: _Pool, read_timeout: float | None) -> None:
        self._conn = conn
        self._pool = pool
        self._read_timeout = read_timeout
        self._released = False
        self.status = conn.status
        self.headers = conn.headers
        self.body: bytes | None = None

    async def stream(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            await conn.wait_data(self._read_timeout)
            if conn.chunks:
                yield conn.take()
            elif conn.complete:
                return

    async def aclose(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._conn)


class H1UpstreamTransport:
    def __init__(self, *, timeouts: Timeouts, limits: PoolLimits) -> None:
        self.timeouts = timeouts
        self.limits = limits
        self._pools: dict[tuple[str, int, bool], _Pool] = {}
        self._targets: dict[str, tuple[str, int, bytes, int]] = {}

    def _split(self, url: str) -> tuple[str, int, bytes, int]:
        """(host, port, Host header value, index where the request target starts)."""
        end = url.find("/", url.find("//") + 2)
        base = url if end < 0 else url[:end]
        found = self._targets.get(base)
        if found is None:
            parts = urlsplit(base)
            if parts.scheme != "http":
                raise UpstreamConnectError(f"the h1 transport speaks plain http only: {url!r}")
            host = parts.hostname or "127.0.0.1"
            found = (host, parts.port or 80, parts.netloc.encode("idna"), len(base))
            if len(self._targets) < 1024:
                self._targets[base] = found
        return found

    def _pool(self, host: str, port: int, long_running: bool) -> _Pool:
        key = (host, port, long_running)
        pool = self._pools.get(key)
        if pool is None:
            limit = 0 if long_running else self.limits.max_connections
            pool = _Pool(host, port, limit, self.timeouts, self.limits.keepalive_expiry)
            self._pools[key] = pool
        return pool

    async def send(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        long_running: bool = False,
    ) -> H1Response:
        host, port, host_header, start = self._split(url)
        target = url[start:] or "/"
        pool = self._pool(host, port, long_running)
        conn = await pool.acquire()
        resp = H1Response(conn, pool, self.timeouts.read)
        try:
            await self._write(conn, method, target, host_header, headers, body)
            await _with_read_timeout(conn, conn.headers_done, self.timeouts.read)
            resp.status = conn.status
            if method == "HEAD" or conn.status in (204, 304) or conn.status < 200:
                # No body follows; llhttp cannot be told so, so this connection is not reused.
                conn.complete, conn.keep_alive = True, False
                resp.body = b""
                await resp.aclose()
                return resp
            length = _content_length(conn.headers)
            if not long_running and length is not None and length <= SMALL_BODY:
                while not conn.complete:
                    await conn.wait_data(self.timeouts.read)
                resp.body = conn.take()
                await resp.aclose()
            return resp
        except BaseException:
            conn.close()
            await resp.aclose()
            raise

    async def _write(
        self,
        conn: _Conn,
        method: str,
        target: str,
        host_header: bytes,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
    ) -> None:
        transport = conn.transport
        assert transport is not None
        lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), b"host: ", host_header]
        sized = False
        for name, value in headers:
            if name == b"content-length":
                sized = True
            lines += (b"\r\n", name, b": ", value)
        if isinstance(body, bytes):
            if not sized:
                lines += (b"\r\ncontent-length: ", str(len(body)).encode())
            lines += (b"\r\n\r\n", body)
            transport.write(b"".join(lines))
            return
        if body is None:
            lines.append(b"\r\n\r\n")
            transport.write(b"".join(lines))
            return
        if not sized:
            lines.append(b"\r\ntransfer-encoding: chunked")
        lines.append(b"\r\n\r\n")
        transport.write(b"".join(lines))
        async for chunk in body:
            if conn.error is not None:
                raise conn.error
            if sized:
                transport.write(chunk)
            elif chunk:
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        if not sized:
            transport.write(b"0\r\n\r\n")

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def _content_length(headers: Headers) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None
