"""uvicorn's HTTP/1.1 protocols (zttp, httptools) with client timeouts and connection limits.

uvicorn closes a kept-alive connection after an idle timeout, but it has no limit on how long a
request head or a body may take, no head size bound on httptools, and its ``limit_concurrency``
counts requests together with connections. ``ClientGuard`` adds, per connection:

- a head timeout (from accept, or from the first byte after a response, until the head is
  complete): 408 and close, or a silent close if nothing was sent;
- a body timeout (longest silence while a body is incomplete and reading is not paused by the
  gateway): 408 and close, or just close once a response has started;
- a send timeout (longest time writing stays paused because the client does not read, or
  a closing connection keeps unsent bytes): abort, which also ends the request and frees its
  seat;
- uvicorn's keep-alive timeout, taken from the settings;
- a head size bound: 431 and close; bytes pipelined behind a request being served pause
  reading at the same bound instead of being buffered;
- a cap on open connections: a connection over it gets 503 and is closed;
- a ``Departure`` in each request's scope (``gateway.http.departure``), called when the
  connection is lost or closed by one of these limits while the request runs, so an app that
  is not in ``receive()`` (a proxy waiting for its upstream) hears of it too.

Cost: one timer handle per connection, armed at ``connection_made`` and re-armed only when it
fires (at the next deadline, or after the shortest timeout). The per-read work is one clock
read and a few attribute updates; deadlines are derived from them when the timer fires.

It relies on attributes both uvicorn protocols share (``cycle``, ``flow``, ``connections``,
``timeout_keep_alive_task``, the cycle's ``more_body``/``response_started``/``response_complete``
/``waiting_for_100_continue``); ``tests/frontdoor/test_client_timeouts.py`` runs on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.http.zttp_impl import ZttpProtocol

from gateway.http.departure import DEPARTURE, Departure
from gateway.http.peer import PeerCertificates, WithPeerCertificates
from gateway.serving.limits import ClientLimits
from gateway.serving.responses import closing_response
from gateway.settings.model import ClientSettings

# A refused connection is read and discarded this long at most after its answer, so that the
# client's request arriving after our close does not reset the connection before the client
# has read the answer (a lingering close); it bounds the file descriptors refusals hold.
REFUSED_LINGER = 1.0
# Timers may fire this much early (libuv counts milliseconds).
_EARLY = 0.002
_HEAD_END = b"\r\n\r\n"

if TYPE_CHECKING:
    _Base = asyncio.Protocol
else:
    _Base = object


class BodyFlow(FlowControl):
    """uvicorn's flow control that also notes when the app last asked for body bytes and
    since when writing is paused.

    The app's ``receive()`` resumes reading on every call (and sends ``100 Continue`` just
    before), so the body timeout can count from then: time the app spent elsewhere, with the
    client waiting for ``100 Continue`` or blocked by a paused read, is not the client's.
    """

    def __init__(self, transport: asyncio.Transport, now: Callable[[], float]) -> None:
        super().__init__(transport)
        self._now = now
        self.asked_at = self.write_paused_at = now()

    def resume_reading(self) -> None:
        self.asked_at = self._now()
        if self.read_paused:
            super().resume_reading()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused_at = self._now()
        super().pause_writing()


class Refused(asyncio.Protocol):
    """Answers once, half-closes, and discards what arrives until the client closes or
    ``REFUSED_LINGER`` passes."""

    def __init__(self, response: bytes, loop: asyncio.AbstractEventLoop) -> None:
        self.response = response
        self.loop = loop
        self.timer: asyncio.TimerHandle | None = None
        self.stuck = False  # closing with unsent bytes at the last look

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
        transport.write(self.response)
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = self.loop.call_later(REFUSED_LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


def refuse(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, response: bytes) -> None:
    protocol = Refused(response, loop)
    transport.set_protocol(protocol)
    protocol.connection_made(transport)


class _State:
    """A connection's guard state, kept off the protocol object: uvicorn's protocols already
    hold ~25 attributes, and past 30 CPython 3.11 stops sharing instance dict keys, which
    slows every attribute access on the request path."""

    __slots__ = (
        "head_bytes", "head_cycle", "head_start", "mark", "max_head", "now", "period",
        "settings", "sniff", "stuck", "timer",
    )  # fmt: skip

    def __init__(self, settings: ClientSettings, now: Callable[[], float]) -> None:
        self.settings = settings
        self.max_head = settings.max_header_bytes
        self.now = now
        self.period = min(
            settings.header_timeout, settings.body_timeout, settings.send_timeout,
            settings.keep_alive_timeout,
        )  # fmt: skip
        self.mark = self.head_start = now()  # the last read; the start of the counted head
        self.head_cycle: object = None  # the cycle current when the counted head began
        self.head_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.stuck = False  # closing with unsent bytes at the last look
        self.sniff: bytes | None = None  # the first bytes, while telling h2c from HTTP/1.1


class ClientGuard(_Base):
    """Mixed in before a uvicorn HTTP/1.1 protocol class (see the module docstring)."""

    limits: ClassVar[ClientLimits]
    # Provided by uvicorn's protocol classes.
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: Any
    cycle: Any
    flow: Any  # a BodyFlow (set in connection_made)
    timeout_keep_alive: Any
    timeout_keep_alive_task: asyncio.TimerHandle | None
    scheme: Any
    app: Any

    _guard: _State | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
        s = self.limits.settings
        if len(self.connections) >= s.max_connections:
            message = f"too many open connections (client.maxConnections={s.max_connections})"
            self.limits.closed["over_capacity"] += 1
            refuse(transport, self.loop, closing_response(503, message, retry_after=1))
            return
        super().connection_made(transport)
        self.timeout_keep_alive = s.keep_alive_timeout
        g = self._guard = _State(s, self.loop.time)
        self.flow = BodyFlow(transport, g.now)
        g.timer = self.loop.call_at(g.mark + g.period, self._on_timer)
        if self.scheme == "https" and self.limits.peer_certificates:
            self._take_peer_certificate(transport)

    def _take_peer_certificate(self, transport: asyncio.Transport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der:
            self.app = WithPeerCertificates(self.app, PeerCertificates((der,)))

    def connection_lost(self, exc: Exception | None) -> None:
        g = self._guard
        if g is not None and g.timer is not None:
            g.timer.cancel()
            g.timer = None
        super().connection_lost(exc)
        self._departed()

    def _departed(self) -> None:
        """Tell the running request its client is gone (as uvicorn, the current cycle)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            departure = cycle.scope.get(DEPARTURE)
            if departure is not None:
                departure()

    def data_received(self, data: bytes) -> None:
        g = self._guard
        assert g is not None
        now = g.mark = g.now()
        cycle = self.cycle
        if cycle is None or not cycle.more_body:
            # Not body bytes: a head (or requests pipelined behind the one being served).
            if cycle is g.head_cycle:
                size = g.head_bytes + len(data)
            else:
                g.head_cycle = cycle
                g.head_start = now
                size = len(data)
            g.head_bytes = size
            if size > g.max_head and self._head_too_large(g, cycle, data, size):
                return
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and DEPARTURE not in cycle.scope:
            # A new request (its task has not run yet; the app finds it in its scope).
            cycle.scope[DEPARTURE] = Departure()

    def _head_too_large(self, g: _State, cycle: Any, data: bytes, size: int) -> bool:
        limit = g.max_head
        if cycle is not None and not cycle.response_complete:
            # Pipelined behind a request still being served: stop reading (uvicorn resumes
            # after the response) rather than buffer them.
            self.flow.pause_reading()
            return False
        before = size - len(data)
        if before + 3 <= limit and (data[:1] == b"\n" or data[:2] == b"\r\n"):
            return False  # the head may end across the two reads; the parser decides
        end = data.find(_HEAD_END)
        if end >= 0 and before + end + len(_HEAD_END) <= limit:
            return False  # the head ends within the limit; the rest is body
        message = f"request head larger than {limit} bytes (client.maxHeaderBytes)"
        self.limits.closed["head_too_large"] += 1
        self._abandon(g, closing_response(431, message))
        return True

    def _abandon(self, g: _State, response: bytes) -> None:
        """Answer and close with a lingering close; the app sees a disconnect."""
        # uvicorn's own clean-up for a lost connection (with an error, so that it leaves the
        # transport open): disconnects the cycle, wakes its receive(), leaves ``connections``.
        super().connection_lost(ConnectionAbortedError())
        self._departed()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        refuse(self.transport, self.loop, response)

    def _close(self, response: bytes | None, *, abort: bool = False) -> None:
        """Close (after ``response``, if given), or ``abort`` (dropping unsent bytes)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # The app's later sends are dropped and its receive() returns a disconnect.
            cycle.disconnected = True
            cycle.message_event.set()
            self.flow.resume_writing()
            self._departed()
        if abort:
            self.transport.abort()
            return
        if response is not None:
            self.transport.write(response)
        self.transport.close()

    def _on_timer(self) -> None:
        g = self._guard
        assert g is not None
        g.timer = None
        if self not in self.connections:
            return  # closed, upgraded to a WebSocket or abandoned
        deadline = self._deadline(g, g.now() + _EARLY)
        if deadline is not None:
            g.timer = self.loop.call_at(deadline, self._on_timer)

    def _deadline(self, g: _State, now: float) -> float | None:
        """The next time to look, or None after closing the connection."""
        s = g.settings
        cycle = self.cycle
        if self.flow.write_paused:
            # The client does not read what was written (a closing transport waits for that
            # too, so this comes first); closing would wait for the buffer, so abort.
            deadline: float = self.flow.write_paused_at + s.send_timeout
            if now >= deadline:
                self.limits.closed["send_timeout"] += 1
                self._close(None, abort=True)
                return None
            return deadline
        if self.transport.is_closing():
            # Closing waits for the client to take the rest; not forever.
            if not self.transport.get_write_buffer_size():
                return None
            if g.stuck:
                self.limits.closed["send_timeout"] += 1
                self._close(None, abort=True)
                return None
            g.stuck = True
            return now + s.send_timeout
        if cycle is not None and cycle.more_body:
            # A request body is incomplete (also the rest of one the app answered early).
            responding = cycle.response_started or cycle.response_complete
            if not responding and (self.flow.read_paused or cycle.waiting_for_100_continue):
                return now + s.body_timeout  # the gateway's turn, not the client's
            asked_at: float = self.flow.asked_at
            deadline = max(g.mark, asked_at) + s.body_timeout
            if now >= deadline:
                message = f"no request body bytes for {s.body_timeout:g}s (client.bodyTimeout)"
                self.limits.closed["body_timeout"] += 1
                self._close(None if responding else closing_response(408, message))
                return None
            return deadline
        if (cycle is not None and not cycle.response_complete) or (
            self.timeout_keep_alive_task is not None
        ):
            # Serving a request (its time is requestTimeout's), or idle with uvicorn's
            # keep-alive timer armed.
            return now + g.period
        if g.head_bytes and g.head_cycle is cycle:
            deadline = g.head_start + s.header_timeout
            if now >= deadline:
                message = (
                    f"request head incomplete after {s.header_timeout:g}s (client.headerTimeout)"
                )
                self.limits.closed["header_timeout"] += 1
                self._close(closing_response(408, message))
                return None
            return deadline
        # Idle without uvicorn's timer: nothing sent yet on a new connection, or the rest of a
        # body the app did not read has been discarded.
        deadline = g.mark + (s.header_timeout if cycle is None else s.keep_alive_timeout)
        if now >= deadline:
            if cycle is None:
                self.limits.closed["header_timeout"] += 1  # never sent a request
            self.transport.close()
            return None
        return deadline


class GuardedZttpProtocol(ClientGuard, ZttpProtocol):
    pass


class GuardedHttpToolsProtocol(ClientGuard, HttpToolsProtocol):
    pass


_PROTOCOLS: dict[str, type[ClientGuard]] = {
    "zttp": GuardedZttpProtocol,
    "httptools": GuardedHttpToolsProtocol,
}


def protocol_class(
    implementation: str, limits: ClientLimits, *, http2: type | None = None
) -> type[asyncio.Protocol]:
    """The protocol class for one server: ``implementation`` guarded by ``limits``; with
    ``http2`` (a mixin, ``gateway.serving.h2_select``) before it, connections may switch."""
    base = _PROTOCOLS[implementation]
    bases = (base,) if http2 is None else (http2, base)
    cls: type[asyncio.Protocol] = type(base.__name__, bases, {"limits": limits})
    return cls
