"""Batched, non-blocking activation writes for the router's hot path.

``submit`` only appends to an in-memory queue; a background task writes batches of up to
``max_batch`` records, at most ``max_delay`` seconds after the first record of a batch was
submitted (a full batch goes at once). Until a record is written, ``get_pending`` returns it,
so "invoke, then fetch the activation" works even before the write. A failed write keeps the
batch and retries after a growing pause (capped at 1 s), dropping only records that are not
JSON-serialisable (they would fail forever); ``close`` writes everything pending
and raises ``StoreError`` if the store still refuses, so nothing is lost silently on a
graceful shutdown. A crash loses what was not yet written (at most ``max_delay`` worth). While
the store is down records wait here, at most ``max_pending`` of them: beyond that the oldest
are dropped (``on_drop`` counts them; one log line until a write works again).

In-flight marks (``mark``) are the exception to batching-by-delay: a caller may have to await
the durable mark (before it hands out an activation id), so marks go at once, grouped with
whatever other marks arrive while one write is under way (group commit). A mark that cannot
be written is logged and the activation runs anyway, unprotected: the store being down must
not stop invocations. A record written later removes its mark (same transaction).

Time goes through an injected event clock (``gateway.testing.FakeEventClock`` in tests).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gateway.clock import AsyncioEventClock, EventClock, Timer
from gateway.store.base import Store, StoreError, activation_key
from gateway.store.outage import StoreUnavailable

log = logging.getLogger(__name__)

MAX_RETRY_PAUSE = 1.0


class ActivationWriter:
    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 100,
        max_delay: float = 0.05,
        clock: EventClock | None = None,
        owner: str = "",
        incarnation: str = "",
        max_pending: int = 10_000,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        if max_batch < 1 or max_delay < 0 or max_pending < 1:
            raise ValueError("max_batch, max_pending must be >= 1 and max_delay >= 0")
        self._max_pending = max_pending
        self._on_drop = on_drop
        self._dropping = False  # dropped records since the last write that worked: logged once
        self._store = store
        self._max_batch = max_batch
        self._max_delay = max_delay
        self._clock: EventClock = clock or AsyncioEventClock()
        # (namespace, activationId) -> record, in submission order; written ones are removed
        self._pending: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._due = asyncio.Event()  # a batch should be written now
        self._idle = asyncio.Event()  # nothing pending
        self._idle.set()
        self._timer: Timer | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._failures = 0
        self.batches_written = 0
        self.owner = owner  # the router id that in-flight marks are recorded under
        self.incarnation = incarnation  # and the process under that id
        self._marks: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._drops: list[str] = []
        # activation id -> (timer, mark) of marks deferred by ``mark(delay=...)``
        self._deferred: dict[str, tuple[Timer, tuple[dict[str, Any], asyncio.Future[None]]]] = {}
        self._marker: asyncio.Task[None] | None = None

    def submit(self, record: dict[str, Any]) -> None:
        """Queue ``record``; never blocks, never awaits. A later submit of the same id wins."""
        if self._closing:
            raise StoreError("the activation writer is closed")
        activation_id, namespace, _, _ = activation_key(record)
        self._cancel_deferred(activation_id)  # the record makes its mark unneeded
        key = (namespace, activation_id)
        self._pending.pop(key, None)
        self._pending[key] = record
        self._idle.clear()
        if len(self._pending) > self._max_pending:
            self._drop_oldest()
        if len(self._pending) >= self._max_batch:
            self._due.set()
        elif self._timer is None and not self._due.is_set():
            self._timer = self._clock.call_later(self._max_delay, self._due.set)

    def _drop_oldest(self) -> None:
        """The store has been down long enough to fill the buffer: the oldest record goes
        (counted; logged once until a write works again), so memory stays bounded."""
        self._pending.popitem(last=False)
        if self._on_drop is not None:
            self._on_drop(1)
        if not self._dropping:
            self._dropping = True
            log.error(
                "activation buffer full (%d records, the store is not taking them): dropping "
                "the oldest until it does",
                self._max_pending,
            )

    def mark(self, record: dict[str, Any], delay: float = 0.0) -> asyncio.Future[None]:
        """Mark ``record`` (the failure record to write should this process die before the
        activation's own record) in flight; the future is done once the mark is durable (or
        failed to be, or was not needed). With ``delay``, the mark is written only if the
        activation's record has not been submitted by then: short activations cost nothing."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if delay <= 0:
            self._marks.append((record, future))
            self._kick_marker()
            return future
        activation_id = activation_key(record)[0]
        self._cancel_deferred(activation_id)
        timer = self._clock.call_later(delay, lambda: self._deferred_due(activation_id))
        self._deferred[activation_id] = (timer, (record, future))
        return future

    def _deferred_due(self, activation_id: str) -> None:
        deferred = self._deferred.pop(activation_id, None)
        if deferred is not None:
            deferred[0].cancel()
            self._marks.append(deferred[1])
            self._kick_marker()

    def unmark(self, activation_id: str) -> None:
        """Forget a mark without waiting (the activation ended elsewhere or was refused)."""
        self._cancel_deferred(activation_id)
        self._drops.append(activation_id)
        self._kick_marker()

    def _cancel_deferred(self, activation_id: str) -> None:
        deferred = self._deferred.pop(activation_id, None)
        if deferred is not None:
            deferred[0].cancel()
            future = deferred[1][1]
            if not future.done():
                future.set_result(None)

    def _kick_marker(self) -> None:
        if self._marker is None or self._marker.done():
            self._marker = asyncio.ensure_future(self._write_marks())

    async def _write_marks(self) -> None:
        while self._marks or self._drops:
            marks, self._marks = self._marks, []
            drops, self._drops = self._drops, []
            try:  # marks first: a drop may be for a mark of this very batch
                if marks:
                    await self._store.mark_in_flight(
                        self.owner, [r for r, _ in marks], incarnation=self.incarnation
                    )
                if drops:
                    await self._store.drop_in_flight(drops)
            except StoreUnavailable:
                pass  # the outage is logged once, where it was seen
            except Exception:
                log.exception("cannot write %d in-flight marks", len(marks) + len(drops))
            for _, future in marks:
                if not future.done():
                    future.set_result(None)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def get_pending(self, namespace: str, activation_id: str) -> dict[str, Any] | None:
        return self._pending.get((namespace, activation_id))

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="activation-writer")

    async def flush(self) -> None:
        """Return once everything submitted so far is written (waits through retries)."""
        if self._task is None or self._task.done():
            await self._write_all()
            return
        self._due.set()
        await self._idle.wait()

    async def close(self) -> None:
        self._closing = True
        for activation_id in list(self._deferred):  # no record came: mark them now
            self._deferred_due(activation_id)
        if self._marker is not None:
            await asyncio.gather(self._marker, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._cancel_timer()
        try:
            await self._write_all()
        except Exception:
            self._drop_unencodable()
            await self._write_all()  # one more try; a second failure reaches the caller

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _run(self) -> None:
        while True:
            await self._due.wait()
            self._due.clear()
            self._cancel_timer()
            try:
                await self._write_all()
                self._failures = 0
                self._dropping = False
            except Exception as exc:
                self._drop_unencodable()
                self._failures += 1
                pause = min(MAX_RETRY_PAUSE, 0.01 * 2**self._failures)
                if not isinstance(exc, StoreUnavailable):  # an outage is logged once already
                    log.exception("writing activations failed; retrying in %.2fs", pause)
                self._timer = self._clock.call_later(pause, self._due.set)

    def _drop_unencodable(self) -> None:
        """A record that is not JSON would fail every retry: drop it (loudly), keep the rest."""
        for key, record in list(self._pending.items()):
            try:
                json.dumps(record)
            except (TypeError, ValueError):
                log.error("dropping activation %s/%s: not JSON-serialisable", *key)
                del self._pending[key]

    async def _write_all(self) -> None:
        while self._pending:
            batch = list(itertools.islice(self._pending.items(), self._max_batch))
            await self._store.put_activations([record for _, record in batch])
            self.batches_written += 1
            for key, record in batch:
                if self._pending.get(key) is record:  # not replaced meanwhile
                    del self._pending[key]
        if not self._pending:
            self._idle.set()
