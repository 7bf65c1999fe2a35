"""A router's view of store outages: every call bounded in time, one log line when the store
becomes unreachable and one when it is back, never a traceback per request.

``Outage`` is the pure state machine (time injected); ``GuardedStore`` is the I/O shell that
wraps a ``Store``, turns ``StoreUnreachable`` and timeouts into ``StoreUnavailable`` (already
reported: callers answer 503 with ``Retry-After`` or serve what they know, without logging
again) and lets every other ``StoreError`` through (the store answered, or is broken: not an
outage).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.store.base import StoreError, StoreUnreachable

log = logging.getLogger("gateway.store")

#: What a caller refused during an outage is told to wait before it tries again.
RETRY_AFTER = 5


class StoreUnavailable(StoreUnreachable):
    """The store did not answer; the outage is logged already (once, by ``GuardedStore``)."""


class Outage:
    """Up or down, and the one message each transition logs."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.failures = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, now: float, reason: str) -> str | None:
        self.failures += 1
        if self.down_since is not None:
            return None
        self.down_since = now
        return (
            f"store unreachable ({reason}): serving cached actions, buffering activation "
            f"records, answering 503 to what needs the store"
        )

    def answered(self, now: float) -> str | None:
        if self.down_since is None:
            return None
        lasted, failed = now - self.down_since, self.failures
        self.down_since, self.failures = None, 0
        return f"store reachable again after {lasted:.1f}s ({failed} calls failed meanwhile)"


class GuardedStore:
    """Delegates every coroutine method of a store through ``call``."""

    def __init__(
        self, store: Any, *, timeout: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self.timeout = timeout
        self.outage = Outage()
        self._clock = clock

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                result = await getattr(self._store, method)(*args, **kwargs)
        except (StoreUnreachable, TimeoutError, OSError) as exc:
            reason = str(exc) or f"no answer in {self.timeout:g}s"
            message = self.outage.failed(self._clock(), reason)
            if message is not None:
                log.error("%s", message)
            raise StoreUnavailable(reason) from None
        except StoreError:  # it answered (a conflict, or a broken store): not an outage
            self._answered()
            raise
        self._answered()
        return result

    def _answered(self) -> None:
        message = self.outage.answered(self._clock())
        if message is not None:
            log.warning("%s", message)

    async def open(self) -> None:
        await self._store.open()  # at start a failure is fatal: reported by the caller

    async def close(self) -> None:
        await self._store.close()

    def __getattr__(self, name: str) -> Any:
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            return await self.call(name, *args, **kwargs)

        return guarded
