"""uvicorn's websockets implementation with the client send timeout.

Once a connection is upgraded, uvicorn hands it to its WebSocket protocol, which ``ClientGuard``
no longer watches. A client that stops reading pauses writing, and uvicorn's closes (its own
keep-alive ping timeout, the app's close) wait for the unsent bytes, which such a client never
takes: the connection, its buffers and the app's task would stay. Here writing paused for
``client.sendTimeout`` aborts the connection (counted as ``send_timeout``), as ``ClientGuard``
does for HTTP responses; the app's next send raises and its receive gets a disconnect.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from gateway.serving.limits import ClientLimits


class GuardedWebSocketProtocol(WebSocketsSansIOProtocol):
    limits: ClassVar[ClientLimits]
    _stalled: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stalled is None:
            timeout = self.limits.settings.send_timeout
            self._stalled = self.loop.call_later(timeout, self._abort)

    def resume_writing(self) -> None:
        self._cancel()
        super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def _cancel(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _abort(self) -> None:
        self._stalled = None
        self.limits.closed["send_timeout"] += 1
        self.transport.abort()


def websocket_protocol_class(limits: ClientLimits) -> type[asyncio.Protocol]:
    """The WebSocket protocol class for one server, guarded by ``limits``."""
    cls: type[asyncio.Protocol] = type(
        GuardedWebSocketProtocol.__name__, (GuardedWebSocketProtocol,), {"limits": limits}
    )
    return cls
