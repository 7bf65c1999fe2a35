"""The reverse-proxy ASGI app: picks an upstream by path prefix and streams both ways.

A raw ASGI callable (no Starlette request/response objects): every layer on this path shows up
in the benchmark ratios (docs/performance.md, "Front door"). Identity comes from the digest the
front-door middleware stored in ``scope["gateway.digest"]``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.asgi.context import added_headers, request_context
from gateway.asgi.errorformat import (
    BAD_GATEWAY,
    GATEWAY_TIMEOUT,
    KUBERNETES,
    OPENWHISK,
    send_openwhisk_error,
)
from gateway.http.abandon import ABANDONED
from gateway.http.departure import DEPARTURE
from gateway.http.framing import body_framing
from gateway.http.status import send_bytes, send_status
from gateway.http.types import Receive, Scope, Send
from gateway.http.websocket import http_send
from gateway.proxy.body import ClientDisconnected, RequestBody, read_small
from gateway.proxy.client_watch import ClientWatch
from gateway.proxy.headers import (
    HeaderPolicy,
    ImpersonationRefused,
    authenticated_headers,
    response_headers,
)
from gateway.proxy.transport import (
    SMALL_BODY,
    Transport,
    UpstreamError,
    UpstreamResponse,
)
from gateway.proxy.websocket import (
    HandshakeRefused,
    Relay,
    WebSocketLimits,
    WebSocketUpstream,
    websocket_url,
)
from gateway.reconfigure import Swap, Undo, assign

if TYPE_CHECKING:
    from gateway.settings.model import RequestHeaderSettings

log = logging.getLogger("gateway.proxy")

# Set in the request's task when a response is left unfinished on purpose (the upstream failed
# mid-body, or flow control ended it at its deadline): the server then closes the client
# connection, and its own "returned without completing response" line is dropped.
_ABANDONED = ABANDONED
_SERVER_LINE = "ASGI callable returned without completing response."


class _AbandonedFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _SERVER_LINE and _ABANDONED.get())


_FILTER = _AbandonedFilter()


def _install_filter() -> None:
    server_log = logging.getLogger("uvicorn.error")
    if _FILTER not in server_log.filters:
        server_log.addFilter(_FILTER)


@dataclass(frozen=True, slots=True)
class UpstreamRoute:
    """Requests whose path starts with ``prefix`` go to ``url`` (scheme://host[:port][/base])."""

    prefix: str
    url: str
    strip_prefix: bool = False
    error_format: str = KUBERNETES  # the shape of the front door's own errors on this route
    # The front door's own credential for this upstream (``upstreams[].bearerTokenFile``):
    # sent as ``Authorization: Bearer``, in place of the client's.
    token: str = field(default="", repr=False)


# (upstream url, error kind or "" on success, seconds until response headers)
Observer = Callable[[str, str, float], None]


class ProxyApp:
    # Adds the context's ``response_headers`` (the PF headers) to every response it sends.
    adds_response_headers = True

    def __init__(
        self,
        *,
        routes: list[UpstreamRoute],
        transport: Transport,
        headers: HeaderPolicy | None = None,
        observe: Observer | None = None,
        max_connections: int = 0,
        websockets: WebSocketUpstream | None = None,
    ) -> None:
        if not routes:
            raise ValueError("at least one upstream is required")
        # The pool size the transport was built with (0: unknown); it follows the admitted
        # concurrency on reload.
        self.max_connections = max_connections
        # Longest prefix first, so /api/v2 wins over /api.
        self.routes = sorted(routes, key=lambda r: len(r.prefix), reverse=True)
        self.transport = transport
        self.headers = headers or HeaderPolicy()
        self.observe = observe
        self.websockets = websockets or WebSocketUpstream(WebSocketLimits())
        _install_filter()

    def prepare(self, *, request_header: RequestHeaderSettings, max_connections: int) -> Swap:
        """A reload (``gateway.reconfigure``): the identity headers stripped from requests
        follow the authenticator's, and the pool follows the admitted concurrency (routes and
        the transport keep their settings until a restart)."""
        old = self.headers
        headers = HeaderPolicy(
            identity_headers=(*request_header.username_headers, *request_header.group_headers),
            identity_prefixes=request_header.extra_header_prefixes,
            forward_identity=old.forward_identity,
            impersonation=old.impersonation,
        )
        set_headers = assign(self, headers=headers)
        if max_connections == self.max_connections:
            return set_headers
        resize: Callable[[int], None] | None = getattr(self.transport, "set_max_connections", None)
        if resize is None:
            log.warning("this proxy transport keeps its pool size until restart")
            return set_headers
        resize_pool = resize

        def swap() -> Undo:
            before = self.max_connections
            resize_pool(max_connections)
            self.max_connections = max_connections
            undo_headers = set_headers()

            def undo() -> None:
                undo_headers()
                resize_pool(before)
                self.max_connections = before

            return undo

        return swap

    def route(self, path: str) -> UpstreamRoute | None:
        for r in self.routes:
            if prefix_matches(r.prefix, path):
                return r
        return None

    def error_format(self, path: str) -> str:
        """The error format of the route serving ``path`` (admission asks, on errors only)."""
        r = self.route(path)
        return r.error_format if r is not None else KUBERNETES

    @property
    def has_openwhisk_routes(self) -> bool:
        return any(r.error_format == OPENWHISK for r in self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._websocket(scope, receive, send)
            return
        path: str = scope["path"]
        route = self.route(path)
        if route is None:
            await send_status(
                send, 404, f"no upstream serves {path}", reason="NotFound",
                headers=added_headers(scope),
            )  # fmt: skip
            return
        url = _target(route, scope)
        context = request_context(scope)
        digest = context.digest if context is not None else None
        client = scope.get("client")
        try:
            headers = self.headers.request_headers(
                scope["headers"],
                client_host=client[0] if client else "",
                scheme=scope["scheme"],
                user=digest.user if digest is not None else None,
            )
        except ImpersonationRefused as exc:
            await send_status(
                send, 403, f"impersonation ({exc} header) is not accepted here "
                "(proxy.impersonation: reject)", headers=added_headers(scope),
            )  # fmt: skip
            return
        if route.token:
            headers = authenticated_headers(headers, route.token)
        length, chunked = body_framing(scope)
        body: bytes | RequestBody | None = None
        if 0 < length <= SMALL_BODY:
            body = await read_small(receive, length)
            if body is None:  # the client left before its body was complete
                log.debug("%s %s: request aborted before it was sent", scope["method"], path)
                return
        elif length > 0 or chunked:
            body = RequestBody(receive, length)
        long_running = digest is not None and digest.long_running
        # From here on, a client that goes away ends the request (``client_watch``).
        watch = ClientWatch(receive, scope.get(DEPARTURE))
        if isinstance(body, RequestBody):
            body.on_done = watch.body_read
            watch.arm(reading_body=True)
        else:
            watch.arm(reading_body=False)
        if watch.left:
            log.debug("%s %s: request aborted before it was sent: the client went away",
                      scope["method"], path)  # fmt: skip
            return
        # One frame for the whole exchange (a helper coroutine costs ~2k instructions).
        try:
            started = time.perf_counter()
            try:
                resp = await self.transport.send(
                    scope["method"], url, headers, body, long_running=long_running
                )
            except (UpstreamError, ClientDisconnected) as exc:
                if (isinstance(body, RequestBody) and body.left) or watch.left:
                    # The transport aborted the upstream request and closed its connection.
                    log.debug("%s %s: request aborted: %s", scope["method"], path, exc)
                    return
                assert isinstance(exc, UpstreamError)
                await self._failed(route, exc, started, scope, send)
                return
            elapsed = time.perf_counter() - started
            if context is not None:
                context.upstream_seconds = elapsed
            if self.observe:
                self.observe(route.url, "", elapsed)
            try:
                await self._relay(resp, send, added_headers(scope), watch)
            except UpstreamError as exc:
                if (isinstance(body, RequestBody) and body.left) or watch.left:
                    log.debug("%s %s: request aborted: %s", scope["method"], path, exc)
                    _ABANDONED.set(True)
                    return
                # Headers are out, so no status can be sent any more and the framing the
                # client was promised cannot be kept: end this response by closing its
                # connection.
                log.warning(
                    "upstream %s failed mid-response to %s %s: %s: %s; closing the client "
                    "connection", route.url, scope["method"], path, exc.kind, exc,
                )  # fmt: skip
                _ABANDONED.set(True)
            finally:
                await resp.aclose()
        except asyncio.CancelledError:
            if not watch.handled():
                raise
            log.debug("%s %s: request aborted: the client went away; upstream request "
                      "abandoned", scope["method"], path)  # fmt: skip
        finally:
            watch.disarm()

    async def _failed(
        self, route: UpstreamRoute, exc: UpstreamError, started: float, scope: Scope, send: Send
    ) -> None:
        """The answer to a request its upstream did not answer: 502 or 504."""
        elapsed = time.perf_counter() - started
        context = request_context(scope)
        if context is not None:
            context.upstream_seconds = elapsed
        if self.observe:
            self.observe(route.url, exc.kind, elapsed)
        code = exc.status
        if route.error_format == OPENWHISK:  # no internal address in a platform's answer
            await send_openwhisk_error(
                send, code, GATEWAY_TIMEOUT if code == 504 else BAD_GATEWAY,
                added_headers(scope),
            )  # fmt: skip
            return
        await send_status(
            send, code, f"upstream {route.url}: {exc.kind}: {exc}", headers=added_headers(scope)
        )

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A websocket scope: the upstream's handshake first (its subprotocol is the one
        accepted), then the relay. Refusals are HTTP answers (``gateway.http.websocket``)."""
        refuse = http_send(scope, send)
        path: str = scope["path"]
        route = self.route(path)
        if route is None:
            await send_status(refuse, 404, f"no upstream serves {path}", reason="NotFound")
            return
        if (await receive())["type"] != "websocket.connect":
            return  # the client left
        context = request_context(scope)
        client = scope.get("client")
        try:
            headers = self.headers.request_headers(
                scope["headers"],
                client_host=client[0] if client else "",
                scheme="https" if scope.get("scheme") == "wss" else "http",
                user=context.digest.user if context is not None else None,
            )
        except ImpersonationRefused as exc:
            await send_status(refuse, 403, f"impersonation ({exc} header) is not accepted here "
                              "(proxy.impersonation: reject)")  # fmt: skip
            return
        # aiohttp writes the handshake's own headers (key, version, subprotocols, no
        # extensions: messages cross whole, uncompressed).
        headers = [(n, v) for n, v in headers if not n.startswith(b"sec-websocket-")]
        if route.token:
            headers = authenticated_headers(headers, route.token)
        url = websocket_url(_target(route, scope))
        started = time.perf_counter()
        try:
            upstream = await self.websockets.connect(url, headers, scope.get("subprotocols", []))
        except HandshakeRefused as exc:
            if self.observe:
                self.observe(route.url, "", time.perf_counter() - started)
            if exc.answer is None:
                await send_status(refuse, exc.status, f"upstream {route.url}: {exc}")
            else:  # the upstream's own answer (kube-apiserver's Status: kubectl prints it)
                await send_bytes(refuse, exc.status, *exc.answer)
            return
        except UpstreamError as exc:
            await self._failed(route, exc, started, scope, refuse)
            return
        if self.observe:
            self.observe(route.url, "", time.perf_counter() - started)
        try:
            await send({"type": "websocket.accept", "subprotocol": upstream.protocol,
                        "headers": added_headers(scope) or []})  # fmt: skip
            ws = self.websockets
            await Relay(receive, send, upstream, ws.limits, ws.clock).run()
        finally:
            if not upstream.closed:
                await upstream.close(code=1001)

    async def _relay(
        self,
        resp: UpstreamResponse,
        send: Send,
        extra: list[tuple[bytes, bytes]] | None,
        watch: ClientWatch,
    ) -> None:
        headers = response_headers(resp.headers)
        if extra:
            headers += extra
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        if resp.body is not None:
            if watch.watching:
                watch.disarm()  # the last message: receive() then says http.disconnect
            await send({"type": "http.response.body", "body": resp.body})
            return
        # A stream may never end (watch, SSE): it stops when the client leaves.
        async for chunk in resp.stream():
            if watch.left:
                return  # noticed in a send (the task was not cancelled): stop here
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if watch.watching:
            watch.disarm()
        await send({"type": "http.response.body", "body": b""})


def _target(route: UpstreamRoute, scope: Scope) -> str:
    """The upstream URL of a request. The front door made ``raw_path`` canonical
    (gateway.asgi.canonical): every transport sends exactly it, so the upstream serves the
    path that was classified."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    if route.strip_prefix:
        raw_path = _strip_prefix(raw_path, route.prefix.rstrip("/"))
    url = route.url + raw_path.decode("latin-1")
    if scope["query_string"]:
        url += "?" + scope["query_string"].decode("latin-1")
    return url


def prefix_matches(prefix: str, path: str) -> bool:
    """Whether ``prefix`` matches ``path`` on ``/`` boundaries only (Envoy's
    ``path_separated_prefix``): ``/public`` serves ``/public`` and ``/public/...``, never
    ``/publicadmin``, which stripped would reach the upstream as ``/admin`` though it was
    classified as ``/publicadmin`` (issue 21 item 7)."""
    if not path.startswith(prefix):
        return False
    return prefix.endswith("/") or len(path) == len(prefix) or path[len(prefix)] == "/"


def _strip_prefix(raw_path: bytes, prefix: str) -> bytes:
    """``raw_path`` without the part that decodes to ``prefix`` (``%XX`` is one byte of it)."""
    i = 0
    for _ in range(len(prefix.encode("utf-8"))):
        i += 3 if raw_path[i : i + 1] == b"%" else 1
    rest = raw_path[i:]
    return rest if rest.startswith(b"/") else b"/" + rest
