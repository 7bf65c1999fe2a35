"""In-flight marks: an activation is marked before it runs, so a router that dies leaves a
record to write (``whisk internal error``) rather than nothing. Every driver."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.store import ActivationWriter, Store
from gateway.testing import FakeEventClock
from tests.store.test_store import activation


def failure(aid: str, start: int) -> dict[str, Any]:
    record = activation(aid, start)
    record["end"] = record["duration"] = start
    record["response"] = {
        "status": "whisk internal error",
        "statusCode": 3,
        "success": False,
        "result": {"error": "lost"},
    }
    return record


async def test_recovery_writes_the_marks_without_a_record(store: Store) -> None:
    await store.mark_in_flight("r1", [failure("a" * 32, 1000), failure("b" * 32, 1000)])
    await store.mark_in_flight("r2", [failure("c" * 32, 1000)])
    await store.put_activations([activation("a" * 32, 1000)])  # a finished: its mark goes
    written = await store.recover_in_flight("r1", 5000)
    assert [r["activationId"] for r in written] == ["b" * 32]
    got = await store.get_activation("guest", "b" * 32)
    assert got is not None
    assert got["response"]["status"] == "whisk internal error"
    assert (got["start"], got["end"], got["duration"]) == (1000, 5000, 4000)
    finished = await store.get_activation("guest", "a" * 32)
    assert finished is not None and finished["response"]["status"] == "success"
    assert await store.recover_in_flight("r1", 6000) == []  # marks are gone
    assert await store.get_activation("guest", "c" * 32) is None  # r2 is not r1


async def test_recovery_never_replaces_a_record(store: Store) -> None:
    """A mark whose record was written by someone else (a peer, a late writer) loses."""
    await store.mark_in_flight("r1", [failure("d" * 32, 1000)])
    await store.put_activations([activation("e" * 32, 1)])
    await store.mark_in_flight("r1", [failure("e" * 32, 1000)])  # re-marked after a record
    assert [r["activationId"] for r in await store.recover_in_flight("r1", 2000)] == ["d" * 32]
    kept = await store.get_activation("guest", "e" * 32)
    assert kept is not None and kept["response"]["status"] == "success"


async def test_recovery_of_one_process_leaves_its_successors_marks(store: Store) -> None:
    """The manager recovers what the lost process left, not what a new process under the
    same router id has in flight; a router starting recovers every earlier process's."""
    await store.mark_in_flight("r1", [failure("5" * 32, 1000)], incarnation="old")
    await store.mark_in_flight("r1", [failure("6" * 32, 1000)], incarnation="new")
    lost = await store.recover_in_flight("r1", 2000, incarnation="old")
    assert [r["activationId"] for r in lost] == ["5" * 32]
    assert [r["activationId"] for r in await store.recover_in_flight("r1", 3000)] == ["6" * 32]


async def test_dropped_marks_are_not_recovered(store: Store) -> None:
    await store.mark_in_flight("r1", [failure("f" * 32, 1000)])
    await store.drop_in_flight(["f" * 32])
    assert await store.recover_in_flight("r1", 2000) == []


async def test_writer_groups_marks_and_awaits_them(store: Store) -> None:
    writer = ActivationWriter(store, owner="r9")
    await writer.start()
    try:
        await asyncio.gather(*(writer.mark(failure(f"{i:032x}", 1000)) for i in range(20)))
        writer.submit(activation(f"{0:032x}", 1000))
        writer.unmark(f"{1:032x}")
        late = writer.mark(failure("9" * 32, 1000))
        writer.unmark("9" * 32)  # dropped before its mark was written: gone all the same
        await late
        await writer.flush()
    finally:
        await writer.close()
    written = await store.recover_in_flight("r9", 2000)
    assert sorted(r["activationId"] for r in written) == [f"{i:032x}" for i in range(2, 20)]


async def test_a_deferred_mark_is_written_only_for_a_long_activation(store: Store) -> None:
    """Blocking invocations: a mark waits ``delay``; a record (or unmark) before then means
    the store never sees it, a record after means the mark is written, then removed."""
    clock = FakeEventClock()
    writer = ActivationWriter(store, owner="r7", clock=clock)
    await writer.start()
    try:
        short = writer.mark(failure("1" * 32, 1000), delay=0.05)
        refused = writer.mark(failure("2" * 32, 1000), delay=0.05)
        long_ = writer.mark(failure("3" * 32, 1000), delay=0.05)
        clock.advance(0.04)
        writer.submit(activation("1" * 32, 1000))  # ended in time: its mark is never written
        writer.unmark("2" * 32)  # refused (429) in time
        assert short.done() and refused.done() and not long_.done()
        clock.advance(0.01)
        await long_
        assert [r["activationId"] for r in await store.recover_in_flight("r7", 2000)] == ["3" * 32]
        forgotten = writer.mark(failure("4" * 32, 1000), delay=0.05)
    finally:
        await writer.close()  # an activation without a record: its mark is written at close
    assert forgotten.done()
    assert [r["activationId"] for r in await store.recover_in_flight("r7", 3000)] == ["4" * 32]
    assert await store.get_activation("guest", "2" * 32) is None
