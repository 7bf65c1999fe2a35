"""One suite, every driver: the ``store`` fixture is SQLite and PostgreSQL in turn."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.store import Conflict, Store, StoreError, open_store
from gateway.store.base import next_version


def action(code: str = "def main(a): return a") -> dict[str, Any]:
    return {
        "exec": {"kind": "python:3.11", "code": code, "binary": False},
        "limits": {"timeout": 60000, "memory": 256, "concurrency": 1},
        "publish": False,
    }


def activation(aid: str, start: int, *, ns: str = "guest", name: str = "hello") -> dict[str, Any]:
    return {
        "namespace": ns,
        "name": name,
        "activationId": aid,
        "start": start,
        "end": start + 2,
        "duration": 2,
        "response": {"status": "success", "success": True, "result": {"n": start}},
        "logs": [f"2024-01-01T00:00:00.000000Z stdout: {aid}"],
        "annotations": [{"key": "path", "value": f"{ns}/{name}"}],
        "version": "0.0.1",
        "subject": ns,
        "publish": False,
    }


async def test_action_crud(store: Store) -> None:
    stored = await store.put_action("guest", "hello", action(), overwrite=False)
    assert stored["version"] == "0.0.1"
    assert (stored["namespace"], stored["name"]) == ("guest", "hello")
    assert isinstance(stored["updated"], int) and stored["updated"] > 0
    assert stored["exec"]["code"] == "def main(a): return a"
    assert await store.get_action("guest", "hello") == stored
    assert await store.get_action("other", "hello") is None
    text = await store.get_action_json("guest", "hello")  # unparsed, for the router's worker
    assert isinstance(text, str) and json.loads(text) == stored
    assert await store.get_action_json("other", "hello") is None
    assert await store.delete_action("guest", "hello") == stored
    assert await store.get_action("guest", "hello") is None
    assert await store.delete_action("guest", "hello") is None


async def test_overwrite_conflict_and_versions(store: Store) -> None:
    first = await store.put_action("guest", "a", action("v1"), overwrite=False)
    with pytest.raises(Conflict):
        await store.put_action("guest", "a", action("v2"), overwrite=False)
    assert await store.get_action("guest", "a") == first  # unchanged by the refused write
    second = await store.put_action("guest", "a", action("v2"), overwrite=True)
    third = await store.put_action("guest", "a", action("v3"), overwrite=True)
    assert [second["version"], third["version"]] == ["0.0.2", "0.0.3"]
    assert third["updated"] > second["updated"] > first["updated"]
    got = await store.get_action("guest", "a")
    assert got is not None and got["exec"]["code"] == "v3"
    # overwrite=True on a missing action simply creates it
    assert (await store.put_action("guest", "b", action(), overwrite=True))["version"] == "0.0.1"


def test_next_version() -> None:
    assert next_version(None) == "0.0.1"
    assert next_version("0.0.9") == "0.0.10"
    assert next_version("1.2.3") == "1.2.4"
    assert next_version("garbage") == "0.0.1"


async def test_list_actions_newest_first_with_pages(store: Store) -> None:
    for name in ("a", "b", "c", "d", "e"):
        await store.put_action("guest", name, action(), overwrite=False)
    await store.put_action("guest", "b", action("new"), overwrite=True)  # b is now the newest
    await store.put_action("other", "z", action(), overwrite=False)
    listed = await store.list_actions("guest")
    names = [doc["name"] for doc in listed]
    assert all("code" not in doc["exec"] and doc["exec"]["kind"] for doc in listed)  # issue 21
    assert names[0] == "b"  # updated last
    assert sorted(names) == ["a", "b", "c", "d", "e"]
    # newest first; creations within one millisecond tie and are ordered by name
    assert names == [d["name"] for d in sorted(listed, key=lambda d: (-d["updated"], d["name"]))]
    page = await store.list_actions("guest", limit=2, skip=1)
    assert [doc["name"] for doc in page] == names[1:3]
    assert [doc["name"] for doc in await store.list_actions("guest", limit=0, skip=4)] == names[4:]
    assert await store.list_actions("nobody") == []
    with pytest.raises(StoreError):
        await store.list_actions("guest", limit=-1)


async def test_activations_are_idempotent_on_id(store: Store) -> None:
    record = activation("a" * 32, 1000)
    await store.put_activations([record])
    updated = {**record, "logs": ["later"]}
    await store.put_activations([record, updated])  # twice in one batch, last wins
    await store.put_activations([updated])
    assert await store.get_activation("guest", "a" * 32) == updated
    assert await store.get_activation("other", "a" * 32) is None
    assert len(await store.list_activations("guest", limit=0)) == 1
    await store.put_activations([])  # nothing to do is fine


async def test_list_activations_filters(store: Store) -> None:
    records = [activation(f"{i:032x}", 1000 + i, name="x" if i % 2 else "y") for i in range(10)]
    records.append(activation("f" * 32, 1005, ns="other"))
    await store.put_activations(records)
    newest_first = await store.list_activations("guest", limit=0)
    assert [r["start"] for r in newest_first] == list(range(1009, 999, -1))
    assert [r["start"] for r in await store.list_activations("guest")][:3] == [1009, 1008, 1007]
    page = await store.list_activations("guest", limit=3, skip=2)
    assert [r["start"] for r in page] == [1007, 1006, 1005]
    named = await store.list_activations("guest", name="x", limit=0)
    assert [r["start"] for r in named] == [1009, 1007, 1005, 1003, 1001]
    window = await store.list_activations("guest", since=1003, upto=1006)
    assert [r["start"] for r in window] == [1006, 1005, 1004, 1003]  # both bounds inclusive
    both = await store.list_activations("guest", name="y", since=1004, limit=2)
    assert [r["start"] for r in both] == [1008, 1006]
    assert [r["activationId"] for r in await store.list_activations("other")] == ["f" * 32]


async def test_list_activations_without_docs_drops_logs_and_result(store: Store) -> None:
    """The database leaves the large parts out (issue 21: a listing of 100 MB results)."""
    records = [activation(f"{i:032x}", 1000 + i) for i in range(3)]
    await store.put_activations(records)
    light = await store.list_activations("guest", docs=False, limit=2, skip=1)
    expected = []
    for record in records[1::-1]:
        rest = {k: v for k, v in record.items() if k != "logs"}
        rest["response"] = {k: v for k, v in record["response"].items() if k != "result"}
        expected.append(rest)
    assert light == expected
    assert await store.list_activations("guest", docs=True, limit=1) == [records[2]]


async def test_bad_activation_record_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="activationId"):
        await store.put_activations([{"namespace": "guest", "name": "x"}])


async def test_open_is_idempotent_and_concurrent_opens_migrate_once(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(3)]
    await asyncio.gather(*(s.open() for s in stores))
    await stores[0].open()  # a second open of an open store is a no-op
    await stores[0].put_action("guest", "a", action(), overwrite=False)
    assert (await stores[2].get_action("guest", "a")) is not None
    for s in stores:
        await s.close()
    reopened = open_store(store_url)
    await reopened.open()
    assert (await reopened.get_action("guest", "a")) is not None
    await reopened.close()


async def test_closed_store_raises_store_error(store_url: str) -> None:
    s = open_store(store_url)
    with pytest.raises(StoreError, match="not open"):
        await s.get_action("guest", "a")


async def test_concurrent_overwrites_lose_no_version(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(2)]
    for s in stores:
        await s.open()
    try:
        await stores[0].put_action("guest", "a", action(), overwrite=False)
        await asyncio.gather(
            *(stores[i % 2].put_action("guest", "a", action(), overwrite=True) for i in range(20))
        )
        got = await stores[1].get_action("guest", "a")
        assert got is not None and got["version"] == "0.0.21"
    finally:
        for s in stores:
            await s.close()


async def test_counts_follow_the_list_filters(store: Store) -> None:
    """count=true is the list's length without a limit: same namespace, name and time filters,
    minus ``skip`` (never below zero), on every driver."""
    for name in ("a", "b", "c"):
        await store.put_action("guest", name, action(), overwrite=False)
    await store.put_action("other", "a", action(), overwrite=False)
    assert await store.count_actions("guest") == 3
    assert await store.count_actions("guest", skip=2) == 1
    assert await store.count_actions("guest", skip=5) == 0
    assert await store.count_actions("nobody") == 0
    await store.put_activations(
        [activation(f"{i:032x}", 1000 + i, name="a" if i % 2 else "b") for i in range(6)]
        + [activation("f" * 32, 1000, ns="other")]
    )
    assert await store.count_activations("guest") == 6
    assert await store.count_activations("guest", name="a") == 3
    assert await store.count_activations("guest", since=1003) == len(
        await store.list_activations("guest", limit=200, since=1003)
    )
    assert await store.count_activations("guest", upto=1001, skip=1) == len(
        await store.list_activations("guest", limit=200, upto=1001, skip=1)
    )
