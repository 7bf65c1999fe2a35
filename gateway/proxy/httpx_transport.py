"""Upstream transports through ``httpx.AsyncClient``: httpcore's pool, or httpx-aiohttp's.

Kept so the choice in ADR 0001 can be re-measured (``bench/bench_frontdoor.py --transports``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import h11
import httpx
from aiohttp import ClientResponse, ClientSession, ClientTimeout
from httpx_aiohttp import AiohttpTransport
from yarl import URL

from gateway.proxy.aiohttp_transport import (
    SKIP_AUTO_HEADERS,
    CheckedConnector,
    map_aiohttp_errors,
)
from gateway.proxy.transport import (
    SMALL_BODY,
    Headers,
    PoolLimits,
    Timeouts,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.proxy.upstream_tls import TLSTarget, UpstreamTLS


@contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(str(exc) or "upstream timed out") from exc
    except httpx.ConnectError as exc:
        raise UpstreamConnectError(str(exc)) from exc
    except httpx.HTTPError as exc:
        raise UpstreamProtocolError(str(exc) or type(exc).__name__) from exc


class HttpxResponse:
    __slots__ = ("_resp", "body", "headers", "status")

    def __init__(self, resp: httpx.Response, body: bytes | None) -> None:
        self._resp = resp
        self.status = resp.status_code
        self.headers: Headers = [(k.lower(), v) for k, v in resp.headers.raw]
        self.body = body

    async def stream(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for chunk in _raw(self._resp):
                yield chunk

    async def aclose(self) -> None:
        _refuse_trailing_bytes(self._resp)
        await self._resp.aclose()


async def _raw(resp: httpx.Response) -> AsyncIterator[bytes]:
    """The body as received, without ``aiter_raw``'s close at the end: ``aclose`` must look at
    the connection before it goes back to the pool."""
    assert isinstance(resp.stream, httpx.AsyncByteStream)
    async for chunk in resp.stream:
        yield chunk


def _refuse_trailing_bytes(resp: httpx.Response) -> None:
    """httpcore pools a connection whose response was followed by more bytes (h11 keeps them
    for the next cycle, so the next request would read them as its response). Mark such a
    connection failed, which makes httpcore close it instead. Only the httpcore pool is
    reached through its internals here; other transports (httpx-aiohttp) guard themselves."""
    # httpx's BoundAsyncStream -> AsyncResponseStream -> httpcore's PoolByteStream ->
    # HTTP11ConnectionByteStream, whose connection holds the h11 state.
    layer: Any = resp.stream
    for _ in range(6):
        if layer is None or hasattr(layer, "_connection"):
            break
        layer = getattr(layer, "_stream", None) or getattr(layer, "_httpcore_stream", None)
    state: Any = getattr(getattr(layer, "_connection", None), "_h11_state", None)
    if isinstance(state, h11.Connection) and state.trailing_data[0]:
        state.send_failed()


def _no_cookies() -> CookieJar:
    """A jar that keeps nothing: httpx's client stores every upstream ``Set-Cookie`` (one
    client's session would join the next one's requests, and the jar would only grow)."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class HttpxUpstreamTransport:
    def __init__(
        self, *, timeouts: Timeouts, limits: PoolLimits, tls: UpstreamTLS | None = None
    ) -> None:
        self._tls = tls
        self._timeout = httpx.Timeout(
            connect=timeouts.connect, read=timeouts.read, write=timeouts.read, pool=timeouts.pool
        )
        self._limits = limits
        self._clients: dict[bool, httpx.AsyncClient] = {}

    def _make_transport(
        self, limits: httpx.Limits, tls: TLSTarget | None = None
    ) -> httpx.AsyncBaseTransport:
        return httpx.AsyncHTTPTransport(limits=limits, verify=tls.context if tls else True)

    def _client(self, long_running: bool) -> httpx.AsyncClient:
        client = self._clients.get(long_running)
        if client is None:
            max_conn = None if long_running else self._limits.max_connections
            limits = httpx.Limits(
                max_connections=max_conn,
                max_keepalive_connections=max_conn,
                keepalive_expiry=self._limits.keepalive_expiry,
            )
            # httpcore takes its TLS context per pool: one mounted transport per https upstream.
            targets = self._tls.targets if self._tls is not None else {}
            mounts = {
                f"https://{host}:{port}": self._make_transport(limits, target)
                for (host, port), target in targets.items()
            }
            client = httpx.AsyncClient(
                transport=self._make_transport(limits), timeout=self._timeout, trust_env=False,
                mounts=mounts,
                cookies=_no_cookies(),
            )  # fmt: skip
            self._clients[long_running] = client
        return client

    async def send(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        long_running: bool = False,
    ) -> HttpxResponse:
        client = self._client(long_running)
        with _mapped():
            tls = self._tls.for_url(url) if self._tls is not None else None
            extensions = {"sni_hostname": tls.server_hostname} if tls else {}
            # Not ``client.build_request``: it adds the client's default headers (Accept,
            # Accept-Encoding, Connection, User-Agent) and its cookies; only what the
            # client sent (and the proxy's own headers) goes upstream.
            request = httpx.Request(
                method, url, headers=headers, content=body, extensions=extensions
            )
            resp = await client.send(request, stream=True)
            try:
                length = resp.headers.get("content-length")
                if not long_running and length is not None and int(length) <= SMALL_BODY:
                    body = b"".join([c async for c in _raw(resp)])
                    return HttpxResponse(resp, body)
            except BaseException:
                await resp.aclose()
                raise
        return HttpxResponse(resp, None)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class HttpxAiohttpUpstreamTransport(HttpxUpstreamTransport):
    def _make_transport(
        self, limits: httpx.Limits, tls: TLSTarget | None = None
    ) -> httpx.AsyncBaseTransport:
        return _exact_target_transport(limits, tls)


def _exact_target_transport(
    limits: httpx.Limits, tls: TLSTarget | None
) -> httpx.AsyncBaseTransport:
    """httpx-aiohttp hands aiohttp ``str(request.url)``, which yarl requotes (``%3A`` becomes
    ``:``, ``%2F`` in a query ``/``); this one sends the canonical target unchanged."""

    class Stream(httpx.AsyncByteStream):
        def __init__(self, response: ClientResponse) -> None:
            self._response = response

        async def __aiter__(self) -> AsyncIterator[bytes]:
            with map_aiohttp_errors():
                async for chunk in self._response.content.iter_chunked(16 * 1024):
                    yield chunk

        async def aclose(self) -> None:
            with map_aiohttp_errors():
                await self._response.__aexit__(None, None, None)

    class ExactTargetTransport(AiohttpTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if not isinstance(self.client, ClientSession):
                self.client = self.get_client()
            timeout = request.extensions.get("timeout", {})
            with map_aiohttp_errors():
                data: object
                try:
                    data = request.content or None
                except httpx.RequestNotRead:
                    data = request.stream
                    request.headers.pop("transfer-encoding", None)  # aiohttp frames it
                response = await self.client.request(
                    request.method, URL(str(request.url), encoded=True),
                    headers=request.headers, data=data, allow_redirects=False,
                    skip_auto_headers=SKIP_AUTO_HEADERS,
                    auto_decompress=False, compress=False,
                    ssl=tls.context if tls else True,
                    server_hostname=tls.server_hostname if tls else None,
                    timeout=ClientTimeout(
                        sock_connect=timeout.get("connect"), sock_read=timeout.get("read"),
                        connect=timeout.get("pool"),
                    ),
                ).__aenter__()  # fmt: skip
            return httpx.Response(
                status_code=response.status, headers=response.raw_headers,
                stream=Stream(response), request=request,
                extensions={"http_version": b"HTTP/1.1"},
            )  # fmt: skip

    def session() -> ClientSession:
        # a pooled connection with unread bytes is closed, never reused (see CheckedConnector)
        connector = CheckedConnector(
            limit=limits.max_connections or 0,
            keepalive_timeout=limits.keepalive_expiry or 15.0,
        )
        return ClientSession(connector=connector)

    return ExactTargetTransport(limits=limits, trust_env=False, client=session)
