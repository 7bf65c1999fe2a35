"""The upstream transport seam: one ``send`` call, chosen by name and imported lazily.

Exception tree (raised ``from`` the client library's own exception)::

    UpstreamError
    ├── UpstreamConnectError   connection refused / reset before a response  -> 502
    ├── UpstreamTimeout        connect, pool or read timeout                 -> 504
    └── UpstreamProtocolError  malformed or truncated response               -> 502

The implementations (``h1``, ``aiohttp``, ``httpx``, ``httpx-aiohttp``) were measured against each
other; see docs/decisions/0001-proxy-transport.md for why ``h1`` (our own HTTP/1.1 client on
httptools) is the default.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from gateway.proxy.upstream_tls import UpstreamTLS

TransportName = Literal["aiohttp", "httpx", "httpx-aiohttp", "h1"]
TRANSPORTS: dict[str, str] = {
    "aiohttp": "gateway.proxy.aiohttp_transport:AiohttpUpstreamTransport",
    "httpx": "gateway.proxy.httpx_transport:HttpxUpstreamTransport",
    "httpx-aiohttp": "gateway.proxy.httpx_transport:HttpxAiohttpUpstreamTransport",
    "h1": "gateway.proxy.h1_transport:H1UpstreamTransport",
}

# Packages only optional transports import (the ``httpx`` extra).
OPTIONAL_PACKAGES = frozenset({"httpx", "httpx_aiohttp"})

Headers = list[tuple[bytes, bytes]]


class UpstreamError(Exception):
    """What every transport raises for an upstream failure: its library's errors become one of
    the subclasses inside the transport, and the proxy maps them to a status in one place
    (``status``), so all transports answer the same failure the same way."""

    kind = "error"
    status = 502


class UpstreamConnectError(UpstreamError):
    kind = "connect"


class UpstreamTimeout(UpstreamError):
    kind = "timeout"
    status = 504


class UpstreamProtocolError(UpstreamError):
    kind = "protocol"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Seconds; ``None`` disables. ``read`` is the gap allowed between two reads, so long
    streams stay open as long as the upstream keeps sending."""

    connect: float | None = 5.0
    read: float | None = 60.0
    pool: float | None = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    """``max_connections`` bounds regular requests; long-running ones (watch, SSE) use their
    own unbounded pool so they can never starve admitted requests of connections."""

    max_connections: int = 600
    keepalive_expiry: float = 15.0


class UpstreamResponse(Protocol):
    status: int
    # Lower-cased names, as received; hop-by-hop headers are still present.
    headers: Headers
    # Set when the whole body was read with the headers (small, sized bodies).
    body: bytes | None

    def stream(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    async def send(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        long_running: bool = False,
    ) -> UpstreamResponse:
        """Send a request; return once the response headers arrived. Raises ``UpstreamError``."""
        ...

    async def aclose(self) -> None: ...


# Response bodies up to this size with a Content-Length are read in one go (one ASGI send).
SMALL_BODY = 64 * 1024


def create_transport(
    name: str, *, timeouts: Timeouts, limits: PoolLimits, tls: UpstreamTLS | None = None
) -> Transport:
    """``tls``: the contexts for ``https://`` upstreams (``gateway.proxy.upstream_tls``)."""
    try:
        target = TRANSPORTS[name]
    except KeyError:
        raise ValueError(
            f"unknown proxy transport {name!r}; choose one of {', '.join(sorted(TRANSPORTS))}"
        ) from None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL_PACKAGES:
            raise
        raise ValueError(
            f"proxy transport {name!r} needs the {exc.name!r} package: install "
            "'apf-gateway[httpx]', or choose the h1 or aiohttp transport"
        ) from exc
    cls = getattr(module, attr)
    transport: Transport = cls(timeouts=timeouts, limits=limits, tls=tls)
    return transport
