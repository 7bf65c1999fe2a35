from __future__ import annotations

import pytest

from gateway.store import StoreError, open_store
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SQLiteStore


def test_sqlite_urls() -> None:
    store = open_store("sqlite:///var/lib/apf/store.db")
    assert isinstance(store, SQLiteStore) and store.path == "/var/lib/apf/store.db"
    memory = open_store("sqlite://:memory:")
    assert isinstance(memory, SQLiteStore) and memory.path == ":memory:"
    with pytest.raises(StoreError, match="no database file"):
        open_store("sqlite://")


def test_postgres_url_schema_is_taken_out_of_the_dsn() -> None:
    store = open_store("postgresql://u@h:5432/db?schema=tenant_1&sslmode=disable")
    assert isinstance(store, PostgresStore)
    assert store.schema == "tenant_1"
    assert store.dsn == "postgresql://u@h:5432/db?sslmode=disable"
    assert open_store("postgres://u@h/db").schema == "public"  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="schema"):
        open_store("postgresql://u@h/db?schema=bad;drop")


def test_unknown_scheme() -> None:
    with pytest.raises(StoreError, match="unsupported store URL"):
        open_store("mysql://x")


async def test_memory_store_works() -> None:
    store = open_store("sqlite://:memory:")
    await store.open()
    await store.put_action("ns", "a", {}, overwrite=False)
    assert (await store.get_action("ns", "a")) is not None
    await store.close()
