"""ActivationWriter over real stores; its delay runs on a fake event clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.store import ActivationWriter, Store, StoreError
from gateway.store.outage import StoreUnavailable
from gateway.testing import FakeEventClock

from .test_store import activation


class CountingStore:
    """A real store that also records the batches it was given (and can fail on demand)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.batches: list[int] = []
        self.fail_next = 0
        self.written = asyncio.Event()

    async def put_activations(self, records: list[dict[str, Any]]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise StoreError("injected failure")
        await self.inner.put_activations(records)
        self.batches.append(len(records))
        self.written.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def count(store: Store) -> int:
    return len(await store.list_activations("guest", limit=0))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_no_record_lost_on_close(store: Store) -> None:
    writer = ActivationWriter(store)
    await writer.start()
    for i in range(1000):
        writer.submit(activation(f"{i:032x}", i))
    await writer.close()
    assert await count(store) == 1000
    with pytest.raises(StoreError, match="closed"):
        writer.submit(activation("f" * 32, 1))


async def test_full_batches_go_at_once(store: Store) -> None:
    spy = CountingStore(store)
    writer = ActivationWriter(spy, max_batch=100, clock=FakeEventClock())  # the clock never moves
    await writer.start()
    for i in range(250):
        writer.submit(activation(f"{i:032x}", i))
    await writer.flush()
    assert spy.batches == [100, 100, 50]
    assert await count(store) == 250
    await writer.close()


async def test_partial_batch_waits_for_max_delay(store: Store) -> None:
    clock = FakeEventClock()
    spy = CountingStore(store)
    writer = ActivationWriter(spy, max_batch=100, max_delay=0.05, clock=clock)
    await writer.start()
    writer.submit(activation("a" * 32, 1))
    writer.submit(activation("b" * 32, 2))
    await settle()
    clock.advance(0.049)
    await settle()
    assert spy.batches == [] and writer.pending == 2
    clock.advance(0.001)
    await asyncio.wait_for(spy.written.wait(), 10)
    assert spy.batches == [2]
    await writer.close()


async def test_get_pending_until_written(store: Store) -> None:
    writer = ActivationWriter(store, clock=FakeEventClock())
    await writer.start()
    record = activation("c" * 32, 7)
    writer.submit(record)
    assert await writer.get_pending("guest", "c" * 32) is record
    assert await writer.get_pending("other", "c" * 32) is None
    assert await store.get_activation("guest", "c" * 32) is None
    await writer.flush()
    assert await writer.get_pending("guest", "c" * 32) is None
    assert await store.get_activation("guest", "c" * 32) == record
    await writer.close()


async def test_failed_write_is_retried(store: Store) -> None:
    clock = FakeEventClock()
    spy = CountingStore(store)
    spy.fail_next = 1
    writer = ActivationWriter(spy, max_batch=1, clock=clock)
    await writer.start()
    writer.submit(activation("d" * 32, 1))
    await settle()
    assert writer.pending == 1 and spy.batches == []  # failed once, kept
    clock.advance(1.0)  # past the retry pause
    await asyncio.wait_for(spy.written.wait(), 10)
    assert spy.batches == [1] and writer.pending == 0
    await writer.close()


async def test_close_without_start_still_writes(store: Store) -> None:
    writer = ActivationWriter(store, clock=FakeEventClock())
    writer.submit(activation("e" * 32, 1))
    await writer.close()
    assert await count(store) == 1


async def test_unencodable_record_is_dropped_not_retried_forever(store: Store) -> None:
    clock = FakeEventClock()
    writer = ActivationWriter(store, clock=clock)
    await writer.start()
    writer.submit(activation("1" * 32, 1))
    writer.submit({**activation("2" * 32, 2), "logs": {"not", "json"}})
    writer.submit(activation("3" * 32, 3))
    clock.advance(0.05)
    for _ in range(200):  # the failed batch, then the retry after the pause
        await asyncio.sleep(0)
        clock.advance(0.1)
        if writer.pending == 0:
            break
    await writer.close()
    assert [r["activationId"] for r in await store.list_activations("guest")] == [
        "3" * 32,
        "1" * 32,
    ]


async def test_records_wait_for_a_store_outage_in_a_bounded_buffer(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage keeps at most ``max_pending`` records (the oldest dropped, counted, logged
    once) and writes the rest once the store answers; the outage itself is not logged here
    (``StoreUnavailable``: the store guard logged it once)."""
    clock = FakeEventClock()
    spy = CountingStore(store)
    spy.fail_next = 10**6
    dropped: list[int] = []
    writer = ActivationWriter(spy, max_batch=2, clock=clock, max_pending=3, on_drop=dropped.append)

    async def unavailable(records: list[dict[str, Any]]) -> None:
        raise StoreUnavailable("down")

    spy.put_activations = unavailable  # type: ignore[method-assign]
    await writer.start()
    for i in range(5):
        writer.submit(activation(f"{i:032x}", i))
        await settle()
        clock.advance(1.0)
        await settle()
    assert writer.pending == 3 and sum(dropped) == 2
    assert await writer.get_pending("guest", f"{0:032x}") is None  # the oldest went
    assert await writer.get_pending("guest", f"{4:032x}") is not None
    del spy.put_activations  # the store is back
    spy.fail_next = 0
    clock.advance(1.0)
    await writer.flush()
    assert await count(store) == 3
    full = [r for r in caplog.records if "activation buffer full" in r.getMessage()]
    assert len(full) == 1 and not any(r.exc_info for r in caplog.records)
    await writer.close()
