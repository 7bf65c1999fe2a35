"""The client's request body as the transports consume it: pulled one ASGI message at a time,
and refused when it ends short of its framing.

A body that ends early (the client went away, or fewer bytes than its ``Content-Length``) must
never reach the upstream as if it were complete: forwarded with the original length, the
upstream would read the next request on that kept-alive connection as the rest of this body
(request smuggling); forwarded chunked, a truncated upload would look whole. So the iterator
raises ``ClientDisconnected`` instead of ending, every transport then closes the upstream
connection, and nothing of this request is pooled.

Memory: the server hands over at most what it buffered since the last ``receive()`` (uvicorn
pauses reading the socket above 64 KiB), and the next message is pulled only after the
transport wrote and drained the previous one, so a request holds O(one message) here.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.http.types import Receive


class ClientDisconnected(Exception):
    """The request body ended before its framing said it would; the upstream request is
    aborted and its connection closed."""


class RequestBody:
    """An async iterator of body chunks; ``left`` tells, after an error, that the client was
    at fault (the transport may have wrapped ``ClientDisconnected`` in its own exception)."""

    __slots__ = ("_receive", "done", "expected", "left", "on_done", "received")

    def __init__(self, receive: Receive, expected: int) -> None:
        self._receive = receive
        self.expected = expected  # -1: chunked, no length
        self.received = 0
        self.done = False
        self.left = False
        # Called once the body was read whole: ``receive()`` then has no reader.
        self.on_done: Callable[[], None] | None = None

    def __aiter__(self) -> RequestBody:
        return self

    async def __anext__(self) -> bytes:
        while not self.done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.left = True
                raise ClientDisconnected(
                    f"the client went away after {self.received} bytes of its request body"
                )
            body: bytes = message.get("body", b"")
            self.received += len(body)
            if not message.get("more_body", False):
                self.done = True
                if 0 <= self.expected != self.received:
                    self.left = True
                    raise ClientDisconnected(
                        f"request body of {self.received} bytes, "
                        f"Content-Length said {self.expected}"
                    )
                if self.on_done is not None:
                    self.on_done()
            if body:
                return body
        raise StopAsyncIteration


async def read_small(receive: Receive, length: int) -> bytes | None:
    """The whole body of ``length`` bytes, or None when the client left before it was all
    here (then nothing is sent upstream)."""
    parts = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body: bytes = message.get("body", b"")
        parts.append(body)
        received += len(body)
        if not message.get("more_body", False):
            break
    if received != length:
        return None
    return parts[0] if len(parts) == 1 else b"".join(parts)
