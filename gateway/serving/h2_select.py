"""Which protocol a client connection speaks: HTTP/2 after ALPN "h2" on a TLS connection, or
after the h2c preface on a plain one when ``client.http2.priorKnowledge`` is on; HTTP/1.1
otherwise.

Mixed in before a guarded HTTP/1.1 protocol class only when HTTP/2 may be spoken, so a plain
listener without h2c runs exactly the HTTP/1.1 classes. With h2c on, an HTTP/1.1 connection
pays one test of its first read (``_State.sniff``) per read.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from gateway.serving.h2_limits import ALPN_PROTOCOLS, preface_state, speaks_http2
from gateway.serving.h2_protocol import Http2Protocol
from gateway.serving.protocol import ClientGuard


class Http2Select(ClientGuard):
    """Hands the connection to ``Http2Protocol`` when it speaks HTTP/2 (see the module)."""

    alpn_protocols: ClassVar[list[str]] = list(ALPN_PROTOCOLS)  # read by uvicorn's TLS context
    prior_knowledge: ClassVar[bool] = False
    # Provided by uvicorn's protocol classes.
    app: Any
    config: Any
    server_state: Any
    app_state: dict[str, Any]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        g = self._guard
        if g is None:
            return  # refused: over client.maxConnections
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            if speaks_http2(ssl_object.selected_alpn_protocol()):
                self._switch(b"")
        elif self.prior_knowledge:
            g.sniff = b""

    def data_received(self, data: bytes) -> None:
        g = self._guard
        if g is not None and g.sniff is not None:
            data = g.sniff + data
            http2 = preface_state(data)
            if http2 is None:
                g.sniff = data  # a preface cut short; the header timeout still runs
                return
            g.sniff = None
            if http2:
                self._switch(data)
                return
        super().data_received(data)

    def _switch(self, data: bytes) -> None:
        """Leave HTTP/1.1 (nothing of it has run but ``connection_made``) for HTTP/2."""
        g = self._guard
        assert g is not None
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        self.connections.discard(self)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        protocol = Http2Protocol(
            self.app, self.config, self.server_state, self.app_state, self.limits, self.loop
        )
        transport = self.transport
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if data:
            protocol.data_received(data)


def http2_mixin(prior_knowledge: bool) -> type[Http2Select]:
    """The mixin for ``protocol_class(http2=...)``: ALPN always, h2c when asked."""
    return type("Http2Select", (Http2Select,), {"prior_knowledge": prior_knowledge})
