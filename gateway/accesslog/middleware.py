"""``RequestLog``: the front door's outermost request layer: the request ID, then one access
log entry per request, whatever answered it (the proxy, or the gateway's own 400, 401, 403,
404, 429, 502, 504).

On the event loop it only counts bytes, keeps the status, and appends an entry to the
writer's queue when the request is over; everything else (formatting, redaction, writing)
happens in the writer's thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from time import perf_counter  # a global, not an attribute look-up per call (compiled)

from gateway.accesslog.fields import Entry
from gateway.accesslog.requestid import request_id
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.reconfigure import Swap, assign

# Logged when no response was sent because the client left first (nginx's 499).
CLIENT_CLOSED = 499
Headers = list[tuple[bytes, bytes]]
# The messages that start a response (a refused websocket handshake's HTTP answer included).
_HTTP_STARTS = frozenset({"http.response.start", "websocket.http.response.start"})
_STARTS = _HTTP_STARTS | {"websocket.accept"}


def header_name(name: str) -> bytes:
    return name.lower().encode("latin-1")


def with_id(headers: Headers, name: bytes, value: bytes) -> Headers:
    """``headers`` with ``name`` set to ``value`` only (an upstream's own value is replaced:
    the client gets the ID the gateway forwarded and logged)."""
    out = [h for h in headers if h[0] != name]
    out.append((name, value))
    return out


class RequestLog:
    def __init__(
        self,
        app: ASGIApp,
        *,
        submit: Callable[[Entry], None],
        header: str = "X-Request-Id",
        enabled: bool = True,
    ) -> None:
        self.app = app
        self.submit = submit
        self.header = header_name(header)
        self.enabled = enabled

    def prepare(self, *, header: str, enabled: bool) -> Swap:
        return assign(self, header=header_name(header), enabled=enabled)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.serve(self.app, scope, receive, send)

    async def serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Run ``app`` for one http or websocket request."""
        name = self.header
        headers: Headers = scope["headers"]
        rid, text, kept = request_id(headers, name)
        if not kept:  # forwarded upstream with the request's other headers
            scope["headers"] = with_id(headers, name, rid)
        if not self.enabled:
            await app(scope, receive, _adding_id(send, name, rid))
            return
        started = perf_counter()
        ex = _Exchange(send, receive, name, rid)
        failed = True
        try:
            await app(scope, ex.receive, ex)
            failed = False
        finally:
            status = ex.status
            if not status:
                status = 500 if failed else CLIENT_CLOSED
            self.submit(
                Entry(
                    started, perf_counter() - started, text, scope, status, ex.bytes_in,
                    ex.bytes_out, generated=not kept,
                )
            )  # fmt: skip


class _Exchange:
    """One request's counting ``send`` (the object itself) and ``receive``: one object per
    request, where two closures cost two function objects and the cells of their shared
    counters (decision 0033)."""

    __slots__ = ("_receive", "_send", "bytes_in", "bytes_out", "name", "rid", "status")

    def __init__(self, send: Send, receive: Receive, name: bytes, rid: bytes) -> None:
        self._send = send
        self._receive = receive
        self.name = name
        self.rid = rid
        self.status = 0
        self.bytes_in = 0
        self.bytes_out = 0

    async def __call__(self, message: Message) -> None:
        kind: str = message["type"]  # typed: native comparisons (compiled)
        if kind == "http.response.body":
            self.bytes_out += len(message.get("body", b""))
        elif kind in _HTTP_STARTS:
            self.status = message["status"]
            message["headers"] = with_id(message.get("headers", []), self.name, self.rid)
        elif kind == "websocket.send":
            self.bytes_out += _frame_size(message)
        elif kind == "websocket.http.response.body":  # a refused handshake's HTTP answer
            self.bytes_out += len(message.get("body", b""))
        elif kind == "websocket.accept":
            self.status = 101
            message["headers"] = with_id(message.get("headers", []), self.name, self.rid)
        elif kind == "websocket.close" and not self.status:
            self.status = 403  # closed before the handshake was accepted
        await self._send(message)

    async def receive(self) -> Message:
        message = await self._receive()
        kind: str = message["type"]  # typed: native comparisons (compiled)
        if kind == "http.request":
            self.bytes_in += len(message.get("body", b""))
        elif kind == "websocket.receive":
            self.bytes_in += _frame_size(message)
        return message


def _adding_id(send: Send, name: bytes, rid: bytes) -> Callable[[Message], Awaitable[None]]:
    async def send_with_id(message: Message) -> None:
        if message["type"] in _STARTS:
            message["headers"] = with_id(message.get("headers", []), name, rid)
        await send(message)

    return send_with_id


def _frame_size(message: Message) -> int:
    data = message.get("bytes")
    if data is not None:
        return len(data)
    text = message.get("text")
    return len(text.encode("utf-8")) if text is not None else 0
