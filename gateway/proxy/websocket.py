"""WebSocket pass-through: an accepted handshake relayed to the route's upstream, message by
message, until either side closes.

Two well-kept implementations do the framing: uvicorn's websockets implementation faces the
client, aiohttp's client faces the upstream (whatever ``proxy.transport`` is: the HTTP
transports have no WebSocket client). The relay moves whole messages, text as text and binary
as binary, so subprotocol framing (kubectl's ``v5.channel.k8s.io`` stream byte, port-forward's
port prefix) passes unchanged. Each side answers its peer's pings itself and pings it every
``pingInterval``; close codes and reasons cross over (codes that exist only as local reports,
1005/1006/1015, become 1000/1001).

Bounds: messages above ``maxMessageBytes`` close that side with 1009 (uvicorn's ``ws_max_size``
toward the client, aiohttp's ``max_msg_size`` toward the upstream) and the other with 1009 too;
one message at a time is in flight per direction (a send is awaited before the next receive,
and both libraries pause reading when their buffer is full), so a peer that does not read
stops the other side's reading. A send the peer takes none of for ``client.sendTimeout`` (to
the client) or ``proxy.readTimeout`` (to the upstream), and ``idleTimeout`` without a message
either way, end the relay. Pings do not count as messages: neither library reports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from gateway.clock import AsyncioEventClock, EventClock, Timer
from gateway.http.types import Receive, Send
from gateway.proxy.aiohttp_transport import map_aiohttp_errors
from gateway.proxy.transport import Headers, UpstreamError
from gateway.proxy.upstream_tls import UpstreamTLS

# Close codes a peer may not send (RFC 6455 7.4.1: local reports only), as the other side's.
_LOCAL_ONLY = {1005: 1000, 1006: 1001, 1015: 1001}
TOO_BIG = 1009
CLOSE_TIMEOUT = 10.0  # a closing handshake, as uvicorn's and aiohttp's own
MAX_REFUSAL_BODY = 64 * 1024  # an upstream's refusal body relayed to the client, at most


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSocketLimits:
    max_message_bytes: int = 1024 * 1024
    idle_timeout: float = 4 * 3600.0
    ping_interval: float = 20.0  # 0: no pings
    client_send_timeout: float = 60.0
    upstream_send_timeout: float = 60.0
    connect_timeout: float | None = 5.0
    handshake_timeout: float | None = 60.0  # the upstream's 101, once connected


class HandshakeRefused(UpstreamError):
    """The upstream answered the handshake with ``status`` instead of 101; ``answer`` is its
    body and content type when it was small enough to keep (``MAX_REFUSAL_BODY``)."""

    kind = "refused"

    def __init__(self, status: int, answer: tuple[bytes, bytes] | None) -> None:
        super().__init__(f"upstream answered the WebSocket handshake with {status}")
        self.status = status
        self.answer = answer


# The body of a refused handshake, kept by ``_RefusalReading`` for the task that connects.
_REFUSAL: contextvars.ContextVar[tuple[bytes, bytes] | None] = contextvars.ContextVar(
    "websocket_refusal", default=None
)


class _RefusalReading(aiohttp.ClientResponse):
    """aiohttp's ``ws_connect`` drops the body of a handshake answered with anything but 101;
    kube-apiserver explains such refusals in a ``Status`` body (kubectl prints its message),
    so a small one is read here and relayed to the client."""

    async def start(self, connection: Any) -> aiohttp.ClientResponse:
        response = await super().start(connection)
        if self.status != 101:
            body = await self.content.read(MAX_REFUSAL_BODY + 1)
            if len(body) <= MAX_REFUSAL_BODY and self.content.at_eof():
                content_type = self.headers.get("Content-Type", "text/plain")
                _REFUSAL.set((body, content_type.encode("latin-1")))
        return response


def upstream_ssl(tls: UpstreamTLS | None, url: str) -> tuple[ssl.SSLContext | bool, str | None]:
    """The TLS context and server name of a ``wss://`` upstream: the route's
    ``upstreams[].tls`` settings, the same contexts the HTTP transports use (without any,
    aiohttp's default: the system's trust store with hostname verification)."""
    if tls is None or not url.startswith("wss://"):
        return True, None
    target = tls.for_url("https://" + url[len("wss://") :])
    if target is None:
        return True, None
    return target.context, target.server_hostname


def websocket_url(url: str) -> str:
    """``http://`` as ``ws://`` and ``https://`` as ``wss://``."""
    return "ws" + url[4:] if url.startswith("http") else url


def sendable(code: int | None) -> int:
    if code is None:
        return 1000
    return _LOCAL_ONLY.get(code, code)


class WebSocketUpstream:
    """aiohttp's WebSocket client, with one session of its own (no pool limit: open websockets
    are bounded by ``client.maxConnections``)."""

    def __init__(
        self,
        limits: WebSocketLimits,
        clock: EventClock | None = None,
        tls: UpstreamTLS | None = None,
    ) -> None:
        self.limits = limits
        self.tls = tls
        self.clock: EventClock = clock or AsyncioEventClock()
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            lim = self.limits
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=lim.connect_timeout, sock_read=lim.handshake_timeout
                ),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                response_class=_RefusalReading,
            )
        return self._session

    async def connect(
        self, url: str, headers: Headers, protocols: list[str]
    ) -> aiohttp.ClientWebSocketResponse[bool]:
        """The open upstream websocket. Raises ``UpstreamError`` (``HandshakeRefused``)."""
        lim = self.limits
        context, server_hostname = upstream_ssl(self.tls, url)
        _REFUSAL.set(None)
        with map_aiohttp_errors():
            try:
                return await self.session().ws_connect(
                    URL(url, encoded=True),
                    protocols=protocols,
                    headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers],
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT),
                    autoclose=True,
                    autoping=True,
                    heartbeat=lim.ping_interval or None,
                    # aiohttp refuses a message of exactly max_msg_size; uvicorn's limit is
                    # inclusive, and so is maxMessageBytes
                    max_msg_size=lim.max_message_bytes + 1,
                    ssl=context,
                    server_hostname=server_hostname,
                    compress=0,
                )
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status == 101:  # a 101 that is not a valid WebSocket answer
                    raise UpstreamError(f"invalid WebSocket handshake: {exc.message}") from exc
                raise HandshakeRefused(exc.status, _REFUSAL.get()) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class Relay:
    """Both directions of one accepted websocket; ``run`` returns once both sides are closed
    (or abandoned)."""

    def __init__(
        self,
        receive: Receive,
        send: Send,
        upstream: aiohttp.ClientWebSocketResponse[bool],
        limits: WebSocketLimits,
        clock: EventClock,
    ) -> None:
        self.receive = receive
        self.send = send
        self.upstream = upstream
        self.limits = limits
        self.clock = clock
        self.last = clock.now()  # the last message relayed either way
        self.to_client_since: float | None = None  # a send to the client in progress
        self.to_upstream_since: float | None = None
        self.timer: Timer | None = None
        self.timed_out: tuple[int, str, bool] | None = None  # (code, reason, client stalled)
        self.tasks: list[asyncio.Task[tuple[int, str] | None]] = []
        self.client_gone = False

    async def run(self) -> None:
        up = asyncio.ensure_future(self._client_to_upstream())
        down = asyncio.ensure_future(self._upstream_to_client())
        self.tasks = [up, down]
        self._arm()
        try:
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self.timer is not None:
                self.timer.cancel()
            for task in self.tasks:
                task.cancel()
            for task in self.tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.timed_out is not None:
            code, reason, client_stalled = self.timed_out
            await self._close_upstream(code, reason)
            if not client_stalled:  # a stalled client would stall this close too
                await self._close_client(code, reason)
            return
        if up.done() and not up.cancelled():
            closed = up.result()
            if closed is not None:  # the client closed: so does the upstream
                await self._close_upstream(*closed)
            else:  # the upstream failed taking a message
                await self._close_client(1014, "upstream connection lost")
        elif down.done() and not down.cancelled() and (closed := down.result()) is not None:
            await self._close_client(*closed)
        elif self.client_gone:
            await self._close_upstream(1001, "client connection lost")
        await self._close_upstream(1000, "")  # no-op once closed

    async def _close_upstream(self, code: int, reason: str) -> None:
        """Closing handshake with the upstream, bounded: a cancelled close drops the
        connection (aiohttp closes its response)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self.upstream.close(code=code, message=reason.encode()), CLOSE_TIMEOUT
            )

    async def _close_client(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):  # the client may be gone already
            await self.send({"type": "websocket.close", "code": code, "reason": reason})

    async def _client_to_upstream(self) -> tuple[int, str] | None:
        """Relays until the client closes; returns the close to pass on."""
        upstream = self.upstream
        while True:
            message = await self.receive()
            t = message["type"]
            if t == "websocket.disconnect":
                code = message.get("code", 1005)
                if "reason" not in message and code in (1005, 1006):
                    # uvicorn reports a lost connection (no close frame) without a reason
                    return 1001, "client connection lost"
                return sendable(code), message.get("reason") or ""
            if t != "websocket.receive":
                continue
            self.to_upstream_since = self.clock.now()
            try:
                text = message.get("text")
                if text is not None:
                    await upstream.send_str(text)
                else:
                    await upstream.send_bytes(message.get("bytes") or b"")
            except (aiohttp.ClientError, ConnectionError):
                return None  # the upstream is gone; its side reports how
            self.to_upstream_since = None
            self.last = self.clock.now()

    async def _upstream_to_client(self) -> tuple[int, str] | None:
        """Relays until the upstream closes; returns the close to give the client."""
        upstream = self.upstream
        send = self.send
        while True:
            msg = await upstream.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                out: dict[str, Any] = {"type": "websocket.send", "text": msg.data}
            elif msg.type is aiohttp.WSMsgType.BINARY:
                out = {"type": "websocket.send", "bytes": msg.data}
            elif msg.type is aiohttp.WSMsgType.CLOSE:
                return sendable(msg.data), msg.extra or ""
            elif msg.type is aiohttp.WSMsgType.ERROR:
                if upstream.close_code == TOO_BIG:
                    return TOO_BIG, "upstream message larger than proxy.websocket.maxMessageBytes"
                return 1014, "upstream connection failed"
            elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                return 1014, "upstream connection lost"
            else:
                continue
            self.to_client_since = self.clock.now()
            try:
                await send(out)
            except OSError:  # uvicorn's ClientDisconnected: the client is gone
                self.client_gone = True
                return None
            self.to_client_since = None
            self.last = self.clock.now()

    def _arm(self) -> None:
        lim = self.limits
        deadlines = [self.last + lim.idle_timeout]
        if self.to_client_since is not None:
            deadlines.append(self.to_client_since + lim.client_send_timeout)
        if self.to_upstream_since is not None:
            deadlines.append(self.to_upstream_since + lim.upstream_send_timeout)
        # A send that starts after this look is seen stalled by the next one: a stalled send
        # ends the relay within twice its timeout.
        deadlines.append(self.clock.now() + min(lim.client_send_timeout, lim.upstream_send_timeout))
        self.timer = self.clock.call_at(min(deadlines), self._check)

    def _check(self) -> None:
        self.timer = None
        now = self.clock.now()
        lim = self.limits
        client_since, upstream_since = self.to_client_since, self.to_upstream_since
        if client_since is not None and now >= client_since + lim.client_send_timeout:
            self._end(1001, "client not reading (client.sendTimeout)", client_stalled=True)
        elif upstream_since is not None and now >= upstream_since + lim.upstream_send_timeout:
            self._end(1014, "upstream not reading (proxy.readTimeout)")
        elif now >= self.last + lim.idle_timeout:
            self._end(1001, "idle (proxy.websocket.idleTimeout)")
        else:
            self._arm()

    def _end(self, code: int, reason: str, *, client_stalled: bool = False) -> None:
        self.timed_out = (code, reason, client_stalled)
        for task in self.tasks:
            task.cancel()
