from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.store import Store, open_store

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


async def postgres_unavailable() -> str | None:
    try:
        import asyncpg  # noqa: PLC0415 - optional asyncpg
    except ImportError:
        return "asyncpg is not installed (extra 'postgres')"
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return f"PostgreSQL at {PG_DSN} does not answer: {exc}"
    await conn.close()
    return None


async def drop_schema(schema: str) -> None:
    import asyncpg  # noqa: PLC0415 - optional asyncpg

    conn = await asyncpg.connect(PG_DSN)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A URL of an empty store: a fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path / 'store.db'}"
        return
    reason = await postgres_unavailable()
    if reason:
        pytest.skip(reason)
    schema = f"apf_test_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        await drop_schema(schema)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
