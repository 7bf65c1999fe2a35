"""Stores: activation writes per second, batched vs unbatched, SQLite and PostgreSQL.

    .venv/bin/python bench/bench_store.py [--rounds 3] [--records 5000] [--single 1000]

Each cell writes fresh records into a fresh database (SQLite file in a temp dir, or a fresh
PostgreSQL schema on postgresql://postgres@127.0.0.1:5432/test), interleaved per round:

  sqlite  one-by-one      store.put_activations([r]) awaited per record (the baseline)
  sqlite  batch 100       store.put_activations(100 records) (sqlite3 on one thread)
  sqlite  writer          ActivationWriter.submit() x N, then close()
  aiosqlite one-by-one / batch 100   the same transactions through aiosqlite (the alternative)
  pg      one-by-one / batch 100 (unnest) / writer / batch 100 via executemany
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aiosqlite

from gateway.store import ActivationWriter, open_store
from gateway.store.base import activation_key, dump_doc
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import _UPSERT_ACTIVATION, MIGRATIONS

PG = "postgresql://postgres@127.0.0.1:5432/test"
BATCH = 100


def records(n: int) -> list[dict[str, Any]]:
    start = int(time.time() * 1000)
    return [
        {
            "namespace": "guest",
            "name": f"action{i % 10}",
            "activationId": uuid.uuid4().hex,
            "start": start + i,
            "end": start + i + 3,
            "duration": 3,
            "response": {"status": "success", "success": True, "result": {"payload": "x" * 64}},
            "logs": ["2024-01-01T00:00:00.000000Z stdout: hello"],
            "annotations": [{"key": "path", "value": f"guest/action{i % 10}"}],
            "version": "0.0.1",
            "subject": "guest",
            "publish": False,
        }
        for i in range(n)
    ]


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def via_store(url: str, recs: list[dict[str, Any]], size: int) -> float:
    store = open_store(url)
    await store.open()
    begin = time.perf_counter()
    for chunk in chunks(recs, size):
        await store.put_activations(chunk)
    elapsed = time.perf_counter() - begin
    await store.close()
    return elapsed


async def via_writer(url: str, recs: list[dict[str, Any]], size: int) -> float:
    store = open_store(url)
    await store.open()
    writer = ActivationWriter(store, max_batch=size)
    await writer.start()
    begin = time.perf_counter()
    for record in recs:
        writer.submit(record)
    await writer.close()
    elapsed = time.perf_counter() - begin
    await store.close()
    return elapsed


async def via_aiosqlite(path: str, recs: list[dict[str, Any]], size: int) -> float:
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await db.execute("PRAGMA busy_timeout = 10000")
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = NORMAL")
        for statement in MIGRATIONS[0][1]:
            await db.execute(statement)
        begin = time.perf_counter()
        for chunk in chunks(recs, size):
            rows = [(*activation_key(r), dump_doc(r)) for r in chunk]
            await db.execute("BEGIN IMMEDIATE")
            await db.executemany(_UPSERT_ACTIVATION, rows)
            await db.execute("COMMIT")
        return time.perf_counter() - begin


async def via_pg_executemany(url: str, recs: list[dict[str, Any]], size: int) -> float:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    await store.open()
    sql = (
        f"INSERT INTO {store._activations} (activation_id, namespace, name, start, doc) "
        "VALUES ($1, $2, $3, $4, $5::jsonb) ON CONFLICT (activation_id) DO UPDATE SET "
        "namespace = excluded.namespace, name = excluded.name, start = excluded.start, "
        "doc = excluded.doc"
    )
    begin = time.perf_counter()
    for chunk in chunks(recs, size):
        await store.pool.executemany(sql, [(*activation_key(r), dump_doc(r)) for r in chunk])
    elapsed = time.perf_counter() - begin
    await store.close()
    return elapsed


async def pg_available() -> bool:
    try:
        import asyncpg  # noqa: PLC0415 - optional asyncpg

        conn = await asyncpg.connect(PG, timeout=3)
    except Exception:
        return False
    await conn.close()
    return True


async def drop_schemas(schemas: list[str]) -> None:
    import asyncpg  # noqa: PLC0415 - optional asyncpg

    conn = await asyncpg.connect(PG)
    for schema in schemas:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=5000, help="records per batched cell")
    parser.add_argument("--single", type=int, default=1000, help="records per one-by-one cell")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    schemas: list[str] = []

    def sqlite_url() -> str:
        return f"sqlite://{tmp}/{uuid.uuid4().hex}.db"

    def pg_url() -> str:
        schemas.append(f"bench_{uuid.uuid4().hex[:10]}")
        return f"{PG}?schema={schemas[-1]}"

    Cell = Callable[[list[dict[str, Any]]], Awaitable[float]]
    cells: dict[str, tuple[Cell, int]] = {
        "sqlite one-by-one": (lambda r: via_store(sqlite_url(), r, 1), args.single),
        "sqlite batch 100": (lambda r: via_store(sqlite_url(), r, BATCH), args.records),
        "sqlite writer": (lambda r: via_writer(sqlite_url(), r, BATCH), args.records),
        "aiosqlite one-by-one": (
            lambda r: via_aiosqlite(f"{tmp}/{uuid.uuid4().hex}.db", r, 1),
            args.single,
        ),
        "aiosqlite batch 100": (
            lambda r: via_aiosqlite(f"{tmp}/{uuid.uuid4().hex}.db", r, BATCH),
            args.records,
        ),
    }
    if await pg_available():
        cells |= {
            "pg one-by-one": (lambda r: via_store(pg_url(), r, 1), args.single),
            "pg batch 100 (unnest)": (lambda r: via_store(pg_url(), r, BATCH), args.records),
            "pg batch 100 (executemany)": (
                lambda r: via_pg_executemany(pg_url(), r, BATCH),
                args.records,
            ),
            "pg writer": (lambda r: via_writer(pg_url(), r, BATCH), args.records),
        }
    else:
        print("PostgreSQL not reachable: PostgreSQL rows skipped")
    rates: dict[str, list[float]] = {name: [] for name in cells}
    try:
        for _ in range(args.rounds):
            for name, (cell, n) in cells.items():
                rates[name].append(n / await cell(records(n)))
    finally:
        if schemas:
            await drop_schemas(schemas)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, rounds={args.rounds}")
    print(
        "\n| variant | records/s median | min | max | ratio vs one-by-one, same driver "
        "| ratio vs sqlite one-by-one |"
    )
    print("|---|---|---|---|---|---|")
    for name, values in rates.items():
        base_name = name.split()[0] + " one-by-one"
        ratios = [v / b for v, b in zip(values, rates[base_name], strict=True)]
        vs_sqlite = [v / b for v, b in zip(values, rates["sqlite one-by-one"], strict=True)]
        print(
            f"| {name} | {statistics.median(values):,.0f} | {min(values):,.0f} | "
            f"{max(values):,.0f} | {statistics.median(ratios):.1f}x "
            f"({min(ratios):.1f}-{max(ratios):.1f}) | {statistics.median(vs_sqlite):.2f}x |"
        )


if __name__ == "__main__":
    asyncio.run(main())
