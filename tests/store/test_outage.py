"""The router's store guard: outages seen on a real store, one log line per transition."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gateway.store import Conflict, Store, StoreError, StoreUnreachable
from gateway.store.outage import GuardedStore, Outage, StoreUnavailable
from gateway.store.sqlite import SQLiteStore


def test_one_message_per_transition() -> None:
    outage = Outage()
    assert outage.answered(0.0) is None  # up stays up, silently
    first = outage.failed(10.0, "connection refused")
    assert first is not None and "store unreachable (connection refused)" in first
    assert outage.failed(11.0, "connection refused") is None and outage.down
    back = outage.answered(25.5)
    assert back == "store reachable again after 15.5s (2 calls failed meanwhile)"
    assert outage.answered(26.0) is None and not outage.down


async def test_a_closed_store_is_an_outage_logged_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    guarded = GuardedStore(store, timeout=5, clock=lambda: now[0])
    doc = {"exec": {"kind": "python:3", "code": "x"}}
    await guarded.put_action("guest", "a", doc, overwrite=False)
    with pytest.raises(Conflict):  # the store answered: not an outage
        await guarded.put_action("guest", "a", doc, overwrite=False)
    assert not guarded.outage.down
    await store.close()  # the store is gone (what a lost connection looks like to a caller)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await guarded.get_action("guest", "a")
    await store.open()
    now[0] = 107.0
    assert (await guarded.get_action("guest", "a") or {})["name"] == "a"
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.store"]
    assert len(lines) == 2 and lines[0].startswith("store unreachable")
    assert lines[1] == "store reachable again after 7.0s (3 calls failed meanwhile)"
    assert not any(r.exc_info for r in caplog.records)


class Hanging:
    async def get_action(self, namespace: str, name: str) -> Any:
        await asyncio.Event().wait()  # a store that never answers


async def test_a_store_that_does_not_answer_in_time_is_an_outage() -> None:
    guarded = GuardedStore(Hanging(), timeout=0)
    with pytest.raises(StoreUnavailable, match="no answer in 0s"):
        await guarded.get_action("guest", "a")
    assert guarded.outage.down


async def test_sqlite_locked_past_its_busy_timeout_is_an_outage_a_lost_table_is_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    inner = SQLiteStore(str(path), busy_timeout_ms=50)  # how long a writer waits for the lock
    await inner.open()
    guarded = GuardedStore(inner, timeout=5)
    doc = {"exec": {"kind": "python:3", "code": "x"}}
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        with pytest.raises(StoreUnavailable, match="locked"):
            await guarded.put_action("guest", "a", doc, overwrite=False)
        assert guarded.outage.down
        other.execute("ROLLBACK")
        await guarded.put_action("guest", "a", doc, overwrite=False)
        assert not guarded.outage.down
        other.execute("DROP TABLE actions")  # broken, not unreachable: the caller's 500
        with pytest.raises(StoreError, match="no such table") as refused:
            await guarded.get_action("guest", "a")
        assert not isinstance(refused.value, StoreUnreachable) and not guarded.outage.down
    finally:
        other.close()
        await inner.close()
