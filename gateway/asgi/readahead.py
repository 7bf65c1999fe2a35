"""The request body a queued request reads ahead, and one budget for all of them.

A request waiting in an APF queue listens for its client, so that it leaves the queue when
the client goes. With a body, listening means reading the body ahead into memory: each waiting
request reads at most ``PER_REQUEST`` (1 MiB), and all of them together at most the budget
(``client.maxQueuedBodyBytes``; 400 queued uploads used to hold 400 MiB). Over the budget a
waiting request simply stops reading ahead: the rest of its body stays in the socket, where the
server's flow control holds it (back-pressure, not an error); it is admitted as before, but
no longer notices a client that leaves before then. The message that takes the total to the
budget is kept (it cannot be given back), and every other read ahead still waiting for its
message is stopped before it takes one, so the total never passes the budget by more than one
server read (uvicorn hands over at most 64 KiB + one 256 KiB socket read).

The bytes go back to the budget as the admitted request's app reads them, or when it ends;
when the budget is empty again after holding at least ``DRAINED_AFTER``, ``on_drained`` runs
(the middleware then has the freed memory returned to the OS, ``asgi.trim``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final

from gateway.http.types import Message, Receive

PER_REQUEST: Final = 1024 * 1024
DEFAULT_BUDGET: Final = 32 * 1024 * 1024
DRAINED_AFTER: Final = 4 * 1024 * 1024


class ReadAheadBudget:
    """Bytes read ahead by all waiting requests; ``peak`` and ``stopped`` are for metrics."""

    __slots__ = ("_high", "_reading", "held", "limit", "on_drained", "peak", "stopped")

    def __init__(
        self, limit: int = DEFAULT_BUDGET, on_drained: Callable[[], None] | None = None
    ) -> None:
        self.limit = limit
        self.on_drained = on_drained
        self._high = 0  # most held since the budget was last empty
        self.held = 0
        self.peak = 0
        self.stopped = 0  # read-aheads stopped because the budget was spent
        self._reading: set[ReadAhead] = set()  # waiting for a body message now

    @property
    def spent(self) -> bool:
        return self.held >= self.limit

    def take(self, size: int, reader: ReadAhead) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)
        self._high = max(self._high, self.held)
        if self.held >= self.limit:
            for other in list(self._reading):
                if other is not reader:
                    other.stop()

    def give_back(self, size: int) -> None:
        self.held -= size
        if self.held == 0 and self._high >= DRAINED_AFTER:
            self._high = 0
            if self.on_drained is not None:
                self.on_drained()


class ReadAhead:
    """One waiting request's messages read ahead, replayed to its app once admitted."""

    __slots__ = ("_stopping", "_task", "budget", "messages", "size")

    def __init__(self, budget: ReadAheadBudget) -> None:
        self.budget = budget
        self.messages: deque[Message] = deque()
        self.size = 0
        self._task: asyncio.Task[object] | None = None
        self._stopping = False

    async def listen(self, receive: Receive, has_body: bool) -> bool:
        """True when the client left; False when reading ahead stopped (this request's cap or
        the budget), the rest of the body staying in the socket."""
        budget = self.budget
        reading = budget._reading
        self._task = asyncio.current_task()
        body_pending = has_body
        try:
            while True:
                if body_pending:
                    if self.size >= PER_REQUEST or budget.spent:
                        budget.stopped += 1
                        return False
                    reading.add(self)
                message = await receive()
                reading.discard(self)
                if message["type"] in ("http.disconnect", "websocket.disconnect"):
                    return True
                self.messages.append(message)
                size = len(message.get("body", b""))
                self.size += size
                budget.take(size, self)
                body_pending = message.get("more_body", False)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            budget.stopped += 1
            return False  # the budget was spent while this read waited: nothing was taken
        finally:
            reading.discard(self)

    def stop(self) -> None:
        """Stop a read waiting for its message (the server keeps the message for later)."""
        if self._task is not None and not self._stopping:
            self._stopping = True
            self._task.cancel()

    async def replay(self, receive: Receive) -> Message:
        """The app's ``receive``: the messages read ahead first, then the socket's."""
        if self.messages:
            message = self.messages.popleft()
            size = len(message.get("body", b""))
            self.size -= size
            self.budget.give_back(size)
            return message
        return await receive()

    def release(self) -> None:
        """The request is over: what it still holds goes back to the budget."""
        self.budget.give_back(self.size)
        self.size = 0
        self.messages.clear()
