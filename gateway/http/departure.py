"""A server's word that a request's client went away, given whatever the app is awaiting.

ASGI tells an app that its client left only through ``receive()`` (``http.disconnect``), and
only when the app is in it. A proxy waiting for its upstream, or writing a request body to an
upstream that does not read it, is not; and a second reader of ``receive()`` would steal body
chunks. The gateway's own servers (``gateway.serving``: HTTP/1.1 and HTTP/2) put a
``Departure`` in each request's scope under ``DEPARTURE`` and call it when the client side
goes away while the request runs: connection lost, stream reset, a send that failed, a client
limit that closed the connection. An app sets ``callback`` for as long as it wants to hear of
it (kube-apiserver cancels the request's context when the client goes away: the same effect).

It rides in the scope dict, so a middleware's ``{**scope, ...}`` copy carries it along. Under
another server there is none, and the app falls back to watching ``receive()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

DEPARTURE: Final = "gateway.departure"


class Departure:
    """Called (by the server) at most once per request; ``left`` stays true afterwards."""

    __slots__ = ("callback", "left")

    def __init__(self) -> None:
        self.callback: Callable[[], None] | None = None
        self.left = False

    def __call__(self) -> None:
        if self.left:
            return
        self.left = True
        callback = self.callback
        if callback is not None:
            self.callback = None
            callback()
