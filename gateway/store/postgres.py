"""PostgreSQL store (asyncpg, optional extra ``postgres``) for routers on several hosts.

Same behaviour as the SQLite store. Tables live in one schema (``?schema=`` in the URL,
default ``public``) so tests and side-by-side deployments can be isolated. Migrations run at
``open`` under an advisory lock, so routers starting together apply each step once. A version
bump locks its action with a transaction-scoped advisory lock. Activation batches are one
``INSERT ... SELECT FROM unnest(...)`` statement (one round trip; ``bench/bench_store.py``
compares it with ``executemany``).
"""

from __future__ import annotations

import re
from typing import Any

from gateway.store.base import (
    Conflict,
    StoreError,
    StoreUnreachable,
    activation_key,
    check_page,
    counted,
    dedupe_activations,
    dump_doc,
    finish_marked,
    load_doc,
    stamp_action,
)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_MIGRATION_LOCK = 0x61706667  # "apfg"
# $1 namespace, $2 name, $3 since, $4 upto: shared by listing and counting activations
_ACTIVATION_FILTER = (
    "namespace = $1 AND ($2::text IS NULL OR name = $2) "
    "AND ($3::bigint IS NULL OR start >= $3) AND ($4::bigint IS NULL OR start <= $4)"
)


def _failure(exc: BaseException) -> StoreError:
    """A driver error as the store's: ``StoreUnreachable`` for what an outage looks like."""
    import asyncpg  # noqa: PLC0415 - optional asyncpg

    unreachable = (
        OSError,
        TimeoutError,
        asyncpg.PostgresConnectionError,  # class 08: connection failures
        asyncpg.exceptions.OperatorInterventionError,  # 57: shutting down, cannot connect now
        asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections
    )
    if isinstance(exc, unreachable) or (
        isinstance(exc, asyncpg.InterfaceError)
        and not isinstance(exc, asyncpg.exceptions.ClientConfigurationError)
    ):
        return StoreUnreachable(f"PostgreSQL: {exc}")
    return StoreError(f"PostgreSQL: {exc}")


def migrations(schema: str) -> list[tuple[int, list[str]]]:
    """(version, statements); append only, never edit an applied step."""
    s = f'"{schema}"'
    return [
        (
            1,
            [
                f"""CREATE TABLE {s}.actions (
                    namespace TEXT NOT NULL,
                    name TEXT NOT NULL,
                    updated BIGINT NOT NULL,
                    doc JSONB NOT NULL,
                    PRIMARY KEY (namespace, name))""",
                f"CREATE INDEX actions_by_updated ON {s}.actions (namespace, updated DESC)",
                f"""CREATE TABLE {s}.activations (
                    activation_id TEXT PRIMARY KEY,
                    namespace TEXT NOT NULL,
                    name TEXT NOT NULL,
                    start BIGINT NOT NULL,
                    doc JSONB NOT NULL)""",
                f"CREATE INDEX activations_by_start ON {s}.activations (namespace, start DESC)",
                f"CREATE INDEX activations_by_name ON {s}.activations "
                "(namespace, name, start DESC)",
            ],
        ),
        (
            2,
            [
                f"""CREATE TABLE {s}.in_flight (
                    activation_id TEXT PRIMARY KEY,
                    router_id TEXT NOT NULL,
                    incarnation TEXT NOT NULL,
                    doc JSONB NOT NULL)""",
                f"CREATE INDEX in_flight_by_router ON {s}.in_flight (router_id)",
            ],
        ),
    ]


class PostgresStore:
    def __init__(self, dsn: str, *, schema: str = "public", max_connections: int = 4) -> None:
        if not _IDENTIFIER.match(schema):
            raise StoreError(f"invalid PostgreSQL schema name {schema!r}")
        self.dsn = dsn
        self.schema = schema
        self.max_connections = max_connections
        self._pool: Any = None
        s = f'"{schema}"'
        self._actions = f"{s}.actions"
        self._activations = f"{s}.activations"
        self._in_flight = f"{s}.in_flight"

    @property
    def pool(self) -> Any:
        if self._pool is None:
            raise StoreUnreachable("the PostgreSQL store is not open")
        return self._pool

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            import asyncpg  # noqa: PLC0415 - optional asyncpg
        except ImportError as exc:
            raise StoreError(
                "PostgreSQL needs asyncpg: pip install 'apf-gateway[postgres]'"
            ) from exc
        try:
            # min_size 0: connections are made on demand; with a floor, asyncpg's pool
            # reconnects in the background and logs a traceback per try during an outage
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=0, max_size=self.max_connections
            )
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
                await self._migrate(conn)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await self.close()
            raise _failure(exc) from exc

    async def _migrate(self, conn: Any) -> None:
        s = f'"{self.schema}"'
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations "
            "(version INTEGER PRIMARY KEY, applied TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in await conn.fetch(f"SELECT version FROM {s}.schema_migrations")}
        for version, statements in migrations(self.schema):
            if version in done:
                continue
            for statement in statements:
                await conn.execute(statement)
            await conn.execute(f"INSERT INTO {s}.schema_migrations (version) VALUES ($1)", version)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        import asyncpg  # noqa: PLC0415 - optional asyncpg

        try:
            return list(await self.pool.fetch(sql, *args))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise _failure(exc) from exc

    # --- actions ------------------------------------------------------------------------
    async def put_action(
        self, namespace: str, name: str, doc: dict[str, Any], *, overwrite: bool
    ) -> dict[str, Any]:
        import asyncpg  # noqa: PLC0415 - optional asyncpg

        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                    f"{self.schema}/{namespace}/{name}",
                )
                row = await conn.fetchrow(
                    f"SELECT doc FROM {self._actions} WHERE namespace = $1 AND name = $2",
                    namespace,
                    name,
                )
                if row is not None and not overwrite:
                    raise Conflict(f"action {namespace}/{name} already exists")
                stored = stamp_action(namespace, name, doc, load_doc(row[0]) if row else None)
                await conn.execute(
                    f"INSERT INTO {self._actions} (namespace, name, updated, doc) "
                    "VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT (namespace, name) DO UPDATE "
                    "SET updated = excluded.updated, doc = excluded.doc",
                    namespace,
                    name,
                    stored["updated"],
                    dump_doc(stored),
                )
                return stored
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise _failure(exc) from exc

    async def get_action(self, namespace: str, name: str) -> dict[str, Any] | None:
        rows = await self._fetch(
            f"SELECT doc FROM {self._actions} WHERE namespace = $1 AND name = $2", namespace, name
        )
        return load_doc(rows[0][0]) if rows else None

    async def get_action_json(self, namespace: str, name: str) -> str | None:
        rows = await self._fetch(
            f"SELECT doc::text FROM {self._actions} WHERE namespace = $1 AND name = $2",
            namespace,
            name,
        )
        return str(rows[0][0]) if rows else None

    async def list_actions(
        self, namespace: str, *, limit: int = 30, skip: int = 0
    ) -> list[dict[str, Any]]:
        check_page(limit, skip)
        rows = await self._fetch(
            f"SELECT doc #- '{{exec,code}}' FROM {self._actions} WHERE namespace = $1 "
            "ORDER BY updated DESC, name LIMIT $2 OFFSET $3",
            namespace,
            limit or None,
            skip,
        )
        return [load_doc(r[0]) for r in rows]

    async def count_actions(self, namespace: str, *, skip: int = 0) -> int:
        check_page(0, skip)
        rows = await self._fetch(
            f"SELECT COUNT(*) FROM {self._actions} WHERE namespace = $1", namespace
        )
        return counted(int(rows[0][0]), skip)

    async def delete_action(self, namespace: str, name: str) -> dict[str, Any] | None:
        rows = await self._fetch(
            f"DELETE FROM {self._actions} WHERE namespace = $1 AND name = $2 RETURNING doc",
            namespace,
            name,
        )
        return load_doc(rows[0][0]) if rows else None

    # --- activations --------------------------------------------------------------------
    async def put_activations(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        records = dedupe_activations(records)
        keys = [activation_key(r) for r in records]
        ids = [k[0] for k in keys]
        # one statement: the records and the removal of their in-flight marks commit together
        await self._fetch(
            f"WITH written AS (INSERT INTO {self._activations} "
            "(activation_id, namespace, name, start, doc) "
            "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], "
            "$5::text[]::jsonb[]) "
            "ON CONFLICT (activation_id) DO UPDATE SET namespace = excluded.namespace, "
            "name = excluded.name, start = excluded.start, doc = excluded.doc) "
            f"DELETE FROM {self._in_flight} WHERE activation_id = ANY($1::text[])",
            ids,
            [k[1] for k in keys],
            [k[2] for k in keys],
            [k[3] for k in keys],
            [dump_doc(r) for r in records],
        )

    async def mark_in_flight(
        self, router_id: str, records: list[dict[str, Any]], *, incarnation: str = ""
    ) -> None:
        if not records:
            return
        await self._fetch(
            f"INSERT INTO {self._in_flight} (activation_id, router_id, incarnation, doc) "
            "SELECT a, $2, $4, d FROM unnest($1::text[], $3::text[]::jsonb[]) AS t(a, d) "
            "ON CONFLICT (activation_id) DO UPDATE SET router_id = excluded.router_id, "
            "incarnation = excluded.incarnation, doc = excluded.doc",
            [activation_key(r)[0] for r in records],
            router_id,
            [dump_doc(r) for r in records],
            incarnation,
        )

    async def drop_in_flight(self, activation_ids: list[str]) -> None:
        if activation_ids:
            await self._fetch(
                f"DELETE FROM {self._in_flight} WHERE activation_id = ANY($1::text[])",
                activation_ids,
            )

    async def recover_in_flight(
        self, router_id: str, end_ms: int, *, incarnation: str | None = None
    ) -> list[dict[str, Any]]:
        import asyncpg  # noqa: PLC0415 - optional asyncpg

        written: list[dict[str, Any]] = []
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    f"DELETE FROM {self._in_flight} WHERE router_id = $1 "
                    "AND ($2::text IS NULL OR incarnation = $2) RETURNING doc",
                    router_id,
                    incarnation,
                )
                for row in rows:
                    record = finish_marked(load_doc(row[0]), end_ms)
                    inserted = await conn.fetchval(
                        f"INSERT INTO {self._activations} "
                        "(activation_id, namespace, name, start, doc) "
                        "VALUES ($1, $2, $3, $4, $5::jsonb) "
                        "ON CONFLICT (activation_id) DO NOTHING RETURNING 1",
                        *activation_key(record),
                        dump_doc(record),
                    )
                    if inserted:
                        written.append(record)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise _failure(exc) from exc
        return written

    async def get_activation(self, namespace: str, activation_id: str) -> dict[str, Any] | None:
        rows = await self._fetch(
            f"SELECT doc FROM {self._activations} WHERE activation_id = $1 AND namespace = $2",
            activation_id,
            namespace,
        )
        return load_doc(rows[0][0]) if rows else None

    async def list_activations(
        self,
        namespace: str,
        *,
        limit: int = 30,
        skip: int = 0,
        name: str | None = None,
        since: int | None = None,
        upto: int | None = None,
        docs: bool = True,
    ) -> list[dict[str, Any]]:
        check_page(limit, skip)
        column = "doc" if docs else "(doc - 'logs') #- '{response,result}'"  # dropped server-side
        rows = await self._fetch(
            f"SELECT {column} FROM {self._activations} WHERE {_ACTIVATION_FILTER} "
            "ORDER BY start DESC, activation_id DESC LIMIT $5 OFFSET $6",
            namespace,
            name,
            since,
            upto,
            limit or None,
            skip,
        )
        return [load_doc(r[0]) for r in rows]

    async def count_activations(
        self,
        namespace: str,
        *,
        skip: int = 0,
        name: str | None = None,
        since: int | None = None,
        upto: int | None = None,
    ) -> int:
        check_page(0, skip)
        rows = await self._fetch(
            f"SELECT COUNT(*) FROM {self._activations} WHERE {_ACTIVATION_FILTER}",
            namespace,
            name,
            since,
            upto,
        )
        return counted(int(rows[0][0]), skip)
