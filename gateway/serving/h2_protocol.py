"""HTTP/2 from clients on the ``h2`` protocol library (docs/decisions/0021).

Each stream is one ASGI ``http`` call (``http_version`` "2") to the same app as HTTP/1.1, so
it goes through the same admission path and is fair-queued by its user like a request on a
connection of its own. The client guards apply per stream or per connection:

- SETTINGS_MAX_CONCURRENT_STREAMS (kube's ``--http2-max-streams-per-connection``), counted
  over the streams whose app task still runs (a reset stream counts until its task ends), so
  reset-and-reopen cannot run more requests at once than the limit; extra ones are refused
  with REFUSED_STREAM;
- a header list bounded by ``client.maxHeaderBytes`` (SETTINGS_MAX_HEADER_LIST_SIZE, and the
  encoded block by bytes), the HPACK table by ``headerTableSize``: past them GOAWAY;
- resets by the client counted per connection (rapid reset): past the budget GOAWAY
  ENHANCE_YOUR_CALM; PING and SETTINGS answers queued while the client does not read are
  bounded the same way;
- the header timeout (the connection preface and any header block), the body timeout per
  stream (RST_STREAM CANCEL), the send timeout (per stream while the client's window stays
  shut; the connection while the socket does not drain), the keep-alive timeout when no
  stream is open: GOAWAY and close;
- a stream reset by the client disconnects its ASGI call: a queued request leaves its queue
  and an executing one ends, releasing its seats as an HTTP/1 disconnect does.

Upstream stays HTTP/1.1: the app sees ``:authority`` as ``Host``, first, as ASGI says, and a
body without Content-Length as ``Transfer-Encoding: chunked``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import unquote

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    PingReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import ProtocolError, StreamClosedError
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame
from uvicorn.protocols.utils import get_local_addr, get_remote_addr, is_ssl

from gateway.serving.h2_limits import BoundedFrameBuffer, ResetBudget
from gateway.serving.h2_stream import Stream
from gateway.serving.limits import ClientLimits
from gateway.serving.protocol import refuse

logger = logging.getLogger("gateway.serving")


class Http2Protocol(asyncio.Protocol):
    """One client connection speaking HTTP/2 (after ALPN "h2" or the h2c preface)."""

    def __init__(self, app: Any, config: Any, server_state: Any, app_state: dict[str, Any],
                 limits: ClientLimits, loop: asyncio.AbstractEventLoop) -> None:  # fmt: skip
        self.app = app  # the HTTP/1.1 protocol's: per connection, it may carry the TLS peer
        self.root_path: str = config.root_path
        self.app_state = app_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.loop = loop
        self.now = loop.time
        self.limits = limits
        s = self.settings = limits.settings
        h = s.http2
        self.conn = conn = H2Connection(
            H2Configuration(
                client_side=False,
                header_encoding=None,
                # Responses are checked by the stream (names lowercased, hop-by-hop fields
                # dropped) and come from an upstream whose HTTP/1.1 parser validated them.
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        self.local = {
            SettingCodes.MAX_CONCURRENT_STREAMS: h.max_streams_per_connection,
            SettingCodes.MAX_HEADER_LIST_SIZE: s.max_header_bytes,
            SettingCodes.HEADER_TABLE_SIZE: h.header_table_size,
            SettingCodes.INITIAL_WINDOW_SIZE: h.initial_window_size,
        }
        conn.local_settings = Settings(client=False, initial_values=self.local)
        # In force from the first frame, not only once the client acknowledges our SETTINGS.
        conn.decoder.max_header_list_size = s.max_header_bytes
        conn.decoder.max_allowed_table_size = h.header_table_size
        buffer = BoundedFrameBuffer(s.max_header_bytes, self.now)
        buffer.max_frame_size = conn.max_inbound_frame_size
        conn.incoming_buffer = buffer
        self.buffer = buffer
        self.resets = ResetBudget(h.max_reset_streams, h.reset_window, self.now)
        self.streams: dict[int, Stream] = {}  # streams whose app task runs
        self.transport: asyncio.Transport | None = None
        self.scheme = "http"
        self.server: tuple[str, int | None] | None = None
        self.client: tuple[str, int] | None = None
        self.write_paused = False
        self.write_paused_at = 0.0
        self.flush_pending = False
        self.control_frames = 0  # PING/SETTINGS answers queued while writing is paused
        self.mark = self.now()  # the last read
        self.idle_since = self.mark  # connected, or the last stream ended (PINGs do not count)
        self.served = False  # a request arrived (the idle limit is then keep-alive's)
        self.closing = False  # GOAWAY sent or received: no new streams
        self.timer: asyncio.TimerHandle | None = None
        self.period = min(s.header_timeout, s.body_timeout, s.send_timeout, s.keep_alive_timeout)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t = self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        self.server = get_local_addr(t)  # type: ignore[arg-type]
        self.client = get_remote_addr(t)  # type: ignore[arg-type]
        self.scheme = "https" if is_ssl(t) else "http"  # type: ignore[arg-type]
        self.conn.initiate_connection()
        # The stream limit is advertised above; enforced here (REFUSED_STREAM, a stream error)
        # rather than by h2, whose check is a connection error before the client could even
        # have read the limit.
        enforced = {**self.local, SettingCodes.MAX_CONCURRENT_STREAMS: 2**31 - 1}
        self.conn.local_settings = Settings(client=False, initial_values=enforced)
        # The connection window starts at 64 KiB whatever the settings say; open it to one
        # stream window per allowed stream, so one unread stream does not stall the others.
        h = self.settings.http2
        extra = h.initial_window_size * h.max_streams_per_connection - 65535
        if extra > 0:
            self.conn.increment_flow_control_window(min(extra, 2**31 - 1 - 65535))
        self.flush()
        self.timer = self.loop.call_later(self.period, self._on_timer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for stream in self.streams.values():
            stream.disconnect()

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.write_paused = True
        self.write_paused_at = self.now()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.control_frames = 0
        for stream in self.streams.values():
            stream.writable.set()

    def data_received(self, data: bytes) -> None:
        self.mark = self.now()
        try:
            events = self.conn.receive_data(data)
        except ProtocolError:
            # Framing in doubt, or a limit passed (DenialOfServiceError: ENHANCE_YOUR_CALM):
            # h2 has queued its GOAWAY; send it and close.
            self._count("http2_protocol_error")
            self._go_away(ErrorCodes.PROTOCOL_ERROR, close=True)
            return
        for event in events:
            if isinstance(event, DataReceived):
                self._on_data(event)
            elif isinstance(event, RequestReceived):
                self._on_request(event)
            elif isinstance(event, StreamEnded):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.more_body = False
                    stream.event.set()
            elif isinstance(event, StreamReset):
                if not self._on_reset(event):
                    return
            elif isinstance(event, WindowUpdated):
                self._on_window(event.stream_id)
            elif isinstance(event, (PingReceived, RemoteSettingsChanged)):
                if isinstance(event, RemoteSettingsChanged):
                    self._on_settings(event)
                if self.write_paused and not self._control_frame():
                    return
            elif isinstance(event, ConnectionTerminated):
                self.closing = True
                if not self.streams:
                    self._close()
        self.flush()

    # What the streams call

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def flush_soon(self) -> None:
        """Flush once the app's current step is done: a response's HEADERS and DATA frames,
        and WINDOW_UPDATEs, go out in one write rather than one each."""
        if not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self.flush_pending = False
        self.flush()

    def acknowledge(self, stream: Stream, size: int) -> None:
        try:
            self.conn.acknowledge_received_data(size, stream.stream_id)
        except (StreamClosedError, ProtocolError):
            return
        self.flush_soon()

    def send_headers(self, stream: Stream, headers: list[tuple[bytes, bytes]]) -> None:
        try:
            self.conn.send_headers(stream.stream_id, headers)
        except (StreamClosedError, ProtocolError):
            stream.disconnect()
            return
        self.flush_soon()

    def reset(self, stream: Stream, code: ErrorCodes) -> None:
        stream.disconnect()
        try:
            self.conn.reset_stream(stream.stream_id, code)
        except (StreamClosedError, ProtocolError):
            return
        self.flush()

    def finished(self, stream: Stream) -> None:
        self.streams.pop(stream.stream_id, None)
        if stream.more_body and not stream.disconnected:
            # Answered before the client finished its body (RFC 9113 section 8.1): the rest is
            # not wanted, and the stream no longer holds a place in h2's stream table.
            self.reset(stream, ErrorCodes.NO_ERROR)
        if not self.streams:
            self.idle_since = self.now()
            if self.closing:
                self._close()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: GOAWAY; running streams finish, then close."""
        if not self.streams:
            self._go_away(ErrorCodes.NO_ERROR, close=False)
            self._close()
            return
        # h2's close_connection() would end the running streams too (no frame may follow it):
        # send the GOAWAY frame ourselves and refuse new streams (``closing``).
        self.closing = True
        frame = GoAwayFrame(0)
        frame.last_stream_id = self.conn.highest_inbound_stream_id
        frame.error_code = ErrorCodes.NO_ERROR
        self.flush()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame.serialize())

    # Events

    def _on_request(self, event: RequestReceived) -> None:
        sid = event.stream_id
        if self.closing or len(self.streams) >= self.settings.http2.max_streams_per_connection:
            # Refused streams cost like reset ones and count against the same budget.
            if not self.closing and not self.resets.spend():
                self._count("http2_rapid_reset")
                self._go_away(ErrorCodes.ENHANCE_YOUR_CALM, close=True)
                return
            with contextlib.suppress(StreamClosedError, ProtocolError):
                self.conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        ended = event.stream_ended is not None
        stream = Stream(self, sid, self._scope(event.headers or (), ended))
        stream.more_body = not ended
        self.streams[sid] = stream
        self.served = True
        task = self.loop.create_task(stream.run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _scope(self, headers: Any, ended: bool) -> dict[str, Any]:
        method = path = authority = b""
        out: list[tuple[bytes, bytes]] = []
        length = False
        for name, value in headers:
            if name[:1] == b":":
                if name == b":method":
                    method = value
                elif name == b":path":
                    path = value
                elif name == b":authority":
                    authority = value
            else:
                length = length or name == b"content-length"
                out.append((name, value))
        if not ended and not length:
            # A body of unknown length: HTTP/2 frames it, HTTP/1.1 (the app, the upstream)
            # needs chunked.
            out.append((b"transfer-encoding", b"chunked"))
        if authority:
            out = [(b"host", authority), *[(n, v) for n, v in out if n != b"host"]]
        raw_path, _, query = path.partition(b"?")
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "2", "server": self.server, "client": self.client,
            "scheme": self.scheme, "method": method.decode("ascii"),
            "root_path": self.root_path, "path": _unquote(raw_path), "raw_path": raw_path,
            "query_string": query, "headers": out, "state": self.app_state.copy(),
        }  # fmt: skip

    def _on_data(self, event: DataReceived) -> None:
        stream = self.streams.get(event.stream_id)
        size = event.flow_controlled_length or 0
        if stream is None or stream.disconnected:
            # Nobody will read it: give the window back at once.
            if size:
                with contextlib.suppress(StreamClosedError, ProtocolError):
                    self.conn.acknowledge_received_data(size, event.stream_id)
            return
        stream.last_data = self.mark
        stream.unacked += size
        if event.data:
            stream.body.append(event.data)
        stream.event.set()

    def _on_reset(self, event: StreamReset) -> bool:
        """False after closing the connection for too many resets."""
        stream = self.streams.get(event.stream_id)
        if stream is None:
            return True
        if not stream.response_complete and not self.resets.spend():
            self._count("http2_rapid_reset")
            self._go_away(ErrorCodes.ENHANCE_YOUR_CALM, close=True)
            return False
        stream.disconnect()
        return True

    def _on_window(self, stream_id: int) -> None:
        if stream_id:
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.writable.set()
            return
        for stream in self.streams.values():
            stream.writable.set()

    def _on_settings(self, event: RemoteSettingsChanged) -> None:
        changed = event.changed_settings
        table = changed.get(SettingCodes.HEADER_TABLE_SIZE)
        if table is not None:
            # Our encoder may use less than the client allows: keep it at our own bound.
            limit = self.settings.http2.header_table_size
            self.conn.encoder.header_table_size = min(table.new_value, limit)
        if SettingCodes.INITIAL_WINDOW_SIZE in changed:
            self._on_window(0)

    def _control_frame(self) -> bool:
        """Count an answer queued while the client does not read; False after closing."""
        self.control_frames += 1
        if self.control_frames <= self.settings.http2.max_control_frames:
            return True
        self._count("http2_control_flood")
        self._abort()
        return False

    # Closing

    def _count(self, reason: str) -> None:
        self.limits.closed[reason] += 1

    def _go_away(self, code: ErrorCodes, *, close: bool) -> None:
        self.closing = True
        with contextlib.suppress(ProtocolError):
            self.conn.close_connection(error_code=code)
        self.flush()
        if close:
            self._linger()

    def _close(self) -> None:
        """Close at once: GOAWAY was sent earlier (shutdown, or the client's own GOAWAY)."""
        self.flush()  # what the streams wrote last
        transport = self.transport
        self.connection_lost(None)
        if transport is not None:
            transport.close()

    def _linger(self) -> None:
        """A lingering close after the GOAWAY (as HTTP/1.1's refusals): half-close and discard
        what the client still sends for a while, so that its unread frames do not turn our
        close into a reset that drops the GOAWAY before the client reads it."""
        transport = self.transport
        self.connection_lost(None)
        if transport is not None and not transport.is_closing():
            refuse(transport, self.loop, b"")

    def _abort(self) -> None:
        for stream in self.streams.values():
            stream.disconnect()
        if self.transport is not None:
            self.transport.abort()

    def _on_timer(self) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            if self.transport is not None and self.transport.get_write_buffer_size():
                self._abort()  # closing, and the client does not take the rest
            return
        if self._check(self.now() + 0.002) and self.transport is not None:
            self.timer = self.loop.call_later(self.period, self._on_timer)

    def _check(self, now: float) -> bool:
        """Apply the timeouts; False after closing the connection."""
        s = self.settings
        if self.write_paused and now - self.write_paused_at >= s.send_timeout:
            self._count("send_timeout")
            self._abort()
            return False
        started = self.buffer.block_started
        if started is not None and now - started >= s.header_timeout:
            self._count("header_timeout")
            self._go_away(ErrorCodes.NO_ERROR, close=True)
            return False
        for stream in list(self.streams.values()):
            if stream.disconnected:
                continue
            if stream.waiting and stream.more_body:
                if now - max(stream.last_data, stream.asked_at) >= s.body_timeout:
                    self._count("body_timeout")
                    self.reset(stream, ErrorCodes.CANCEL)
            elif stream.blocked_since is not None and now - stream.blocked_since >= s.send_timeout:
                self._count("send_timeout")
                self.reset(stream, ErrorCodes.CANCEL)
        if not self.streams:
            idle = s.keep_alive_timeout if self.served else s.header_timeout
            if now - self.idle_since >= idle:
                if not self.served:
                    self._count("header_timeout")
                self._go_away(ErrorCodes.NO_ERROR, close=True)
                return False
        return True


def _unquote(raw: bytes) -> str:
    """The ASGI ``path``: percent-decoded as UTF-8, as uvicorn does for HTTP/1.1."""
    text = raw.decode("latin-1")
    return unquote(text) if "%" in text else text
