"""Upstream transport on ``aiohttp.ClientSession``: the fastest client measured here (ADR 0001)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from gateway.proxy.transport import (
    SMALL_BODY,
    Headers,
    PoolLimits,
    Timeouts,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.proxy.upstream_tls import UpstreamTLS

SKIP_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})


@contextmanager
def map_aiohttp_errors() -> Iterator[None]:
    """aiohttp's errors as ``UpstreamError`` kinds, for both aiohttp-based transports (the
    httpx-aiohttp one too: httpx-aiohttp's own map turns a refused or dropped connection into
    a connect *timeout*, a 504 instead of a 502)."""
    try:
        yield
    except UpstreamError:
        raise
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        raise UpstreamTimeout(str(exc) or "upstream timed out") from exc
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamConnectError(str(exc)) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise UpstreamProtocolError(str(exc) or type(exc).__name__) from exc


class _TLSAbortingHandler(ResponseHandler):
    """Closes a TLS connection at once (as the h1 transport does) instead of waiting up to
    30 s for the upstream's close_notify with the socket open."""

    def close(self) -> None:
        transport = self.transport
        if transport is not None and transport.get_extra_info("sslcontext") is not None:
            self.abort()
        else:
            super().close()


class CheckedConnector(aiohttp.TCPConnector):
    """aiohttp's pool hands out an idle connection that received bytes while idle (a response
    the upstream should never have sent), and the next request then reads those bytes as its
    response. Such a connection has ``should_close`` set (unread data, a started payload): close
    it and take another. ``_get`` is aiohttp's one place where a pooled connection is chosen."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # aiohttp builds its protocol from this factory (a subclass is what it expects)
        self._factory = functools.partial(_TLSAbortingHandler, loop=self._loop)  # type: ignore[assignment]

    async def _get(self, key: Any, traces: list[Any]) -> Any:
        while True:
            conn = await super()._get(key, traces)
            if conn is None or conn.protocol is None or not conn.protocol.should_close:
                return conn
            conn.close()


class _Paced:
    """A request body that tells whether the upstream is taking it: ``since`` is when the
    writer last got a chunk, ``pulling`` is set while it waits on the client instead."""

    __slots__ = ("_body", "done", "pulling", "since")

    def __init__(self, body: AsyncIterator[bytes]) -> None:
        self._body = body
        self.since = time.monotonic()
        self.pulling = False
        self.done = False

    def __aiter__(self) -> _Paced:
        return self

    async def __anext__(self) -> bytes:
        self.pulling = True
        try:
            return await anext(self._body)
        except StopAsyncIteration:
            self.done = True
            raise
        finally:
            self.pulling = False
            self.since = time.monotonic()


async def _stall_guarded(
    request: Awaitable[aiohttp.ClientResponse], paced: _Paced, limit: float
) -> aiohttp.ClientResponse:
    """Await the response, failing with ``UpstreamTimeout`` if the body writer holds a chunk
    the upstream does not take for ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stalled = False
    handle: asyncio.TimerHandle | None = None

    def check() -> None:
        nonlocal stalled, handle
        idle = 0.0 if paced.pulling else time.monotonic() - paced.since
        if paced.done:
            return
        if idle >= limit:
            stalled = True
            task.cancel()
            return
        handle = loop.call_later(limit - idle, check)

    handle = loop.call_later(limit, check)
    try:
        return await request
    except asyncio.CancelledError:
        if not stalled:
            raise
        task.uncancel()
        raise UpstreamTimeout(f"upstream read none of the request for {limit:g}s") from None
    finally:
        handle.cancel()


class AiohttpResponse:
    __slots__ = ("_done", "_resp", "body", "headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse, body: bytes | None) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers: Headers = [(k.lower(), v) for k, v in resp.raw_headers]
        self.body = body
        self._done = body is not None

    async def stream(self) -> AsyncIterator[bytes]:
        with map_aiohttp_errors():
            async for chunk in self._resp.content.iter_any():
                yield chunk
        self._done = True

    async def aclose(self) -> None:
        # Only a response read to its end may give its connection back (aiohttp also keeps
        # one whose request body failed or that got bytes after the response out of the pool).
        if self._done:
            self._resp.release()
        else:
            self._resp.close()


class AiohttpUpstreamTransport:
    def __init__(
        self, *, timeouts: Timeouts, limits: PoolLimits, tls: UpstreamTLS | None = None
    ) -> None:
        self._tls = tls
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.pool,
            sock_connect=timeouts.connect,
            sock_read=timeouts.read,
        )
        self._limits = limits
        # aiohttp starts its read timer only once the body is written, so an upstream that
        # reads none of it would hold the request forever: bound that wait ourselves.
        self._write_timeout = timeouts.read
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    def _session(self, long_running: bool) -> aiohttp.ClientSession:
        session = self._sessions.get(long_running)
        if session is None:
            connector = CheckedConnector(
                limit=0 if long_running else self._limits.max_connections,
                limit_per_host=0,
                keepalive_timeout=self._limits.keepalive_expiry,
                use_dns_cache=True,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                auto_decompress=False,
                skip_auto_headers=SKIP_AUTO_HEADERS,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._sessions[long_running] = session
        return session

    async def send(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        long_running: bool = False,
    ) -> AiohttpResponse:
        str_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
        limit = self._write_timeout
        paced = None
        if limit is not None and body is not None and not isinstance(body, bytes):
            body = paced = _Paced(body)
        tls = self._tls.for_url(url) if self._tls is not None else None
        with map_aiohttp_errors():
            request = self._session(long_running).request(
                method,
                URL(url, encoded=True),  # the canonical target as is: yarl would requote it
                headers=str_headers,
                data=body,
                allow_redirects=False,
                compress=None,
                ssl=tls.context if tls else True,
                server_hostname=tls.server_hostname if tls else None,
            )
            if paced is None or limit is None:
                resp = await request
            else:
                resp = await _stall_guarded(request, paced, limit)
            try:
                length = resp.content_length
                if not long_running and length is not None and length <= SMALL_BODY:
                    return AiohttpResponse(resp, await resp.read())
            except BaseException:
                resp.release()
                raise
        return AiohttpResponse(resp, None)

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
