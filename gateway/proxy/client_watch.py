"""Ending a proxied request when its client goes away, wherever the proxy is waiting.

While armed (from the upstream request's start to the response's last chunk), a client that
leaves cancels the request's task: the cancellation lands in the transport's wait, which
abandons the upstream request (its connection is closed, never pooled: the path a request
deadline takes, ``gateway.asgi.deadline``), and the proxy returns at once, so the seats go back
and the access log records nginx's 499 (no response was sent) rather than the upstream's late
answer. kube-apiserver cancels the request's context when the client goes away, to the same
effect.

How the client's departure is heard:

- under the gateway's servers, their ``Departure`` (``gateway.http.departure``): it comes even
  while a request body is being written to an upstream that does not read it;
- under another server, a task reading ``receive()`` for ``http.disconnect``, started only
  once the request body has been read whole (``RequestBody`` is the one reader until then, and
  sees a departure itself).

A departure noticed inside the task (an HTTP/2 send that failed) cannot cancel the running
task; ``left`` is set and the relay stops at its next chunk.
"""

from __future__ import annotations

import asyncio

from gateway.http.departure import Departure
from gateway.http.running import running_task
from gateway.http.types import Receive


class ClientWatch:
    __slots__ = ("_departure", "_receive", "_task", "armed", "cancelled", "left", "watching")

    def __init__(self, receive: Receive, departure: Departure | None) -> None:
        self._receive = receive
        self._departure = departure  # the scope's ``DEPARTURE``, when the server gives one
        task = running_task()  # no Python-level call (gateway.http.running)
        assert task is not None
        self._task = task
        # The fallback's task reading receive(); disarm it before the response's last message.
        self.watching: asyncio.Future[None] | None = None
        self.armed = False
        self.left = False  # the client went away while armed
        self.cancelled = False  # ... and the task was cancelled for it

    def arm(self, *, reading_body: bool) -> None:
        """Start listening; ``reading_body``: a ``RequestBody`` still reads ``receive()``
        (call ``body_read`` when it is done). ``left`` is then true if the client is already
        gone (a request whose stream was reset before its task ran)."""
        departure = self._departure
        if departure is not None and departure.left:
            self.left = True  # gone before the upstream was asked: the caller returns
            return
        self.armed = True
        if departure is not None:
            departure.callback = self._on_left
        elif not reading_body:
            self.body_read()

    def body_read(self) -> None:
        """The request body was read whole: ``receive()`` is free to watch (fallback only)."""
        if self._departure is None and self.armed and self.watching is None:
            watcher = self.watching = asyncio.ensure_future(_wait_disconnect(self._receive))
            watcher.add_done_callback(self._on_watcher_done)

    def disarm(self) -> None:
        """Stop listening: before the response's last message (after it, ``receive()`` says
        ``http.disconnect`` for a request that simply ended) and when the proxy is done."""
        if not self.armed:
            return
        self.armed = False
        departure = self._departure
        if departure is not None:
            departure.callback = None
        watcher = self.watching
        if watcher is not None:
            self.watching = None
            watcher.remove_done_callback(self._on_watcher_done)
            watcher.cancel()

    def handled(self) -> bool:
        """In an ``except CancelledError``: whether it was this watch's cancellation, now
        taken back (False when another one, a deadline or a shutdown, is pending too)."""
        if not self.cancelled:
            return False
        self.cancelled = False
        self._task.uncancel()
        return not self._task.cancelling()

    def _on_watcher_done(self, watcher: asyncio.Future[None]) -> None:
        if not watcher.cancelled() and watcher.exception() is None:
            self._on_left()

    def _on_left(self) -> None:
        if not self.armed or self.left:
            return
        self.left = True
        if asyncio.current_task() is not self._task:
            self.cancelled = True
            self._task.cancel()


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
