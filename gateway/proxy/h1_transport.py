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
import dataclasses
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from gateway.proxy.h1_connection import Conn, Pool, with_read_timeout
from gateway.proxy.transport import (
    SMALL_BODY,
    Headers,
    PoolLimits,
    Timeouts,
    UpstreamConnectError,
    UpstreamProtocolError,
)
from gateway.proxy.upstream_tls import TLSTarget, UpstreamTLS

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})

# How long ``aclose`` waits for its aborted connections' sockets to close (the loop closes each
# on its next turn; this bounds a transport implementation that never reports it).
CLOSE_WAIT = 5.0


class H1Response:
    __slots__ = ("_conn", "_pool", "_read_timeout", "_released", "body", "headers", "status")

    def __init__(self, conn: Conn, pool: Pool, read_timeout: float | None) -> None:
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
    def __init__(
        self, *, timeouts: Timeouts, limits: PoolLimits, tls: UpstreamTLS | None = None
    ) -> None:
        self.timeouts = timeouts
        self.limits = limits
        self.tls = tls
        self._pools: dict[tuple[str, int, bool], Pool] = {}
        self._closed = False
        self._targets: dict[str, tuple[str, int, bytes, int, TLSTarget | None]] = {}

    def _split(self, url: str) -> tuple[str, int, bytes, int, TLSTarget | None]:
        """(host, port, Host header value, index where the request target starts, TLS)."""
        end = url.find("/", url.find("//") + 2)
        base = url if end < 0 else url[:end]
        found = self._targets.get(base)
        if found is None:
            parts = urlsplit(base)
            host = parts.hostname or "127.0.0.1"
            tls: TLSTarget | None = None
            if parts.scheme == "https":
                if self.tls is None:
                    raise UpstreamConnectError(f"no TLS settings for {url!r}")
                tls = self.tls.target(host, parts.port or 443)
            elif parts.scheme != "http":
                raise UpstreamConnectError(f"the h1 transport speaks http and https: {url!r}")
            port = parts.port or (443 if tls else 80)
            found = (host, port, parts.netloc.encode("idna"), len(base), tls)
            if len(self._targets) < 1024:
                self._targets[base] = found
        return found

    def set_max_connections(self, limit: int) -> None:
        """Follow the admitted concurrency after a reload (long-running pools stay unbounded)."""
        self.limits = dataclasses.replace(self.limits, max_connections=limit)
        for (_, _, long_running), pool in self._pools.items():
            if not long_running:
                pool.resize(limit)

    def _pool(self, host: str, port: int, long_running: bool, tls: TLSTarget | None) -> Pool:
        # One host and port is one scheme: http and https on the same port cannot both answer.
        key = (host, port, long_running)
        pool = self._pools.get(key)
        if pool is None:
            if self._closed:
                raise UpstreamConnectError(f"{host}:{port}: the gateway is stopping")
            limit = 0 if long_running else self.limits.max_connections
            pool = Pool(host, port, limit, self.timeouts, self.limits.keepalive_expiry, tls)
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
        host, port, host_header, start, tls = self._split(url)
        target = url[start:] or "/"
        pool = self._pool(host, port, long_running, tls)
        # RFC 9110 9.2.2: only idempotent requests may be retried without the client asking.
        replayable = method in IDEMPOTENT and (body is None or isinstance(body, bytes))
        while True:
            conn = await pool.acquire()
            try:
                return await self._attempt(
                    conn, pool, method, target, host_header, headers, body, long_running
                )
            except UpstreamProtocolError:
                # A kept-alive connection the upstream closed as we reused it: nothing was
                # received, so the request never ran; send it again on another connection.
                if not (conn.reused and not conn.received and replayable):
                    raise

    async def _attempt(
        self,
        conn: Conn,
        pool: Pool,
        method: str,
        target: str,
        host_header: bytes,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
        long_running: bool,
    ) -> H1Response:
        resp = H1Response(conn, pool, self.timeouts.read)
        try:
            await self._write(conn, method, target, host_header, headers, body)
            await with_read_timeout(conn, conn.headers_done, self.timeouts.read)
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
        conn: Conn,
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
            conn.sent_all = True
            return
        if body is None:
            lines.append(b"\r\n\r\n")
            transport.write(b"".join(lines))
            conn.sent_all = True
            return
        if not sized:
            lines.append(b"\r\ntransfer-encoding: chunked")
        lines.append(b"\r\n\r\n")
        transport.write(b"".join(lines))
        # One chunk in flight: the next is pulled from the client only once the socket took
        # this one, so a slow upstream slows the client instead of filling our memory. A body
        # that ends short raises (``ClientDisconnected``) and the caller closes the connection.
        write_timeout = self.timeouts.read
        async for chunk in body:
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                return  # answered early: stop sending; not ``sent_all``, so never pooled
            if sized:
                transport.write(chunk)
            elif chunk:
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
            if conn.write_paused:
                await conn.drain(write_timeout)
        if conn.error is not None:
            raise conn.error
        if not sized:
            transport.write(b"0\r\n\r\n")
        conn.sent_all = True

    async def aclose(self) -> None:
        """The gateway's stop: every upstream connection is closed, idle or still in use (an
        exchange the server stopped waiting for), and awaited until its socket is: a transport
        the loop never finished closing stays open until a garbage collection finds it, with
        a ResourceWarning, and its upstream keeps the connection."""
        self._closed = True
        lost = [fut for pool in self._pools.values() for fut in pool.close()]
        self._pools.clear()
        if lost:
            await asyncio.wait(lost, timeout=CLOSE_WAIT)


def _content_length(headers: Headers) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None
