"""One HTTP/2 stream as one ASGI ``http`` call: the request body as the client's window
allows, the response as the client's window and the socket allow.

Back-pressure both ways: body bytes are acknowledged (the client's window reopened) only when
the app takes them in ``receive()``, so a stream buffers at most SETTINGS_INITIAL_WINDOW_SIZE;
``send()`` writes no more than the stream's and the connection's send windows and waits while
the socket's writing is paused.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.exceptions import FlowControlError, ProtocolError, StreamClosedError

from gateway.http.departure import DEPARTURE, Departure
from gateway.http.status import status_body


class Owner(Protocol):
    """What a stream uses of its connection (``Http2Protocol``)."""

    app: Any
    conn: H2Connection
    write_paused: bool

    def now(self) -> float: ...
    def flush_soon(self) -> None: ...
    def acknowledge(self, stream: Stream, size: int) -> None: ...
    def send_headers(self, stream: Stream, headers: list[tuple[bytes, bytes]]) -> None: ...
    def reset(self, stream: Stream, code: ErrorCodes) -> None: ...
    def finished(self, stream: Stream) -> None: ...


logger = logging.getLogger("gateway.serving")

# RFC 9113 section 8.2.2: connection-specific fields must not be sent in HTTP/2.
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)


class Stream:
    """A request's state; the connection sets the events, the app's task awaits them."""

    __slots__ = (
        "asked_at", "blocked_since", "body", "delivered", "departure", "disconnected", "event",
        "last_data", "more_body", "proto", "response_complete", "response_started", "scope",
        "stream_id", "unacked", "waiting", "writable",
    )  # fmt: skip

    def __init__(self, proto: Owner, stream_id: int, scope: dict[str, Any]) -> None:
        self.proto = proto
        self.stream_id = stream_id
        self.scope = scope
        # Told when the stream is reset or lost while the app runs (``gateway.http.departure``).
        self.departure = scope[DEPARTURE] = Departure()
        self.body: list[bytes] = []
        self.unacked = 0  # flow-controlled bytes received, not yet taken by the app
        self.more_body = True
        self.delivered = False  # the last body message went to the app
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.event = asyncio.Event()  # body, end of body, reset or connection loss
        self.writable = asyncio.Event()  # window opened or writing resumed
        self.last_data = self.asked_at = proto.now()
        self.waiting = False  # the app waits in receive()
        self.blocked_since: float | None = None  # send() waits for the client's window

    def wake(self) -> None:
        self.event.set()
        self.writable.set()

    def disconnect(self) -> None:
        self.disconnected = True
        self.wake()
        if not self.response_complete:
            self.departure()

    async def run(self) -> None:
        try:
            await self.proto.app(self.scope, self.receive, self.send)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                raise
            logger.exception("exception in the ASGI app on an HTTP/2 stream")
            if not self.response_started and not self.disconnected:
                body = status_body(500, "internal server error")
                await self.send({"type": "http.response.start", "status": 500,
                                 "headers": [(b"content-type", b"application/json")]})  # fmt: skip
                await self.send({"type": "http.response.body", "body": body})
            elif not self.response_complete:
                self.proto.reset(self, ErrorCodes.INTERNAL_ERROR)
        else:
            if not self.response_complete and not self.disconnected:
                self.proto.reset(self, ErrorCodes.INTERNAL_ERROR)  # the app answered nothing
        finally:
            self.proto.finished(self)

    async def receive(self) -> dict[str, Any]:
        while True:
            if self.disconnected or self.response_complete:
                return {"type": "http.disconnect"}
            if self.body or (not self.more_body and not self.delivered):
                chunk = b"".join(self.body) if len(self.body) != 1 else self.body[0]
                self.body.clear()
                if self.unacked:
                    self.proto.acknowledge(self, self.unacked)
                    self.unacked = 0
                if not self.more_body:
                    self.delivered = True
                return {"type": "http.request", "body": chunk, "more_body": self.more_body}
            self.event.clear()
            self.waiting = True
            self.asked_at = self.proto.now()
            try:
                await self.event.wait()
            finally:
                self.waiting = False

    async def send(self, message: dict[str, Any]) -> None:
        if self.disconnected:
            return
        kind = message["type"]
        if kind == "http.response.start":
            if self.response_started:
                raise RuntimeError("http.response.start sent twice")
            self.response_started = True
            headers = [(b":status", str(message["status"]).encode())]
            for raw, value in message.get("headers", ()):
                name = bytes(raw).lower()
                if name not in _HOP_BY_HOP:
                    headers.append((name, bytes(value)))
            self.proto.send_headers(self, headers)
        elif kind == "http.response.body":
            if not self.response_started or self.response_complete:
                raise RuntimeError("http.response.body out of order")
            more = message.get("more_body", False)
            await self._send_data(bytes(message.get("body", b"")), end=not more)
            if not more:
                self.response_complete = True
                self.event.set()  # a receive() waiting for a disconnect returns
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} on an HTTP/2 stream")

    async def _send_data(self, data: bytes, *, end: bool) -> None:
        proto = self.proto
        conn = proto.conn
        sid = self.stream_id
        view = memoryview(data)
        if not view and not end:
            return
        while True:
            if self.disconnected:
                return
            window = 0 if proto.write_paused else conn.local_flow_control_window(sid)
            if window > 0 or not view:
                size = min(len(view), window, conn.max_outbound_frame_size)
                last = end and size == len(view)
                try:
                    conn.send_data(sid, view[:size].tobytes(), end_stream=last)
                except (StreamClosedError, FlowControlError, ProtocolError):
                    self.disconnect()  # reset by the client meanwhile
                    return
                proto.flush_soon()
                view = view[size:]
                if not view:
                    self.blocked_since = None
                    return
                continue
            # The client's window is closed, or the socket does not take more: wait.
            if self.blocked_since is None and not proto.write_paused:
                self.blocked_since = proto.now()
            self.writable.clear()
            await self.writable.wait()
            if conn.local_flow_control_window(sid) > 0:
                self.blocked_since = None
