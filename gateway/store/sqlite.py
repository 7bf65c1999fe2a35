"""SQLite store: the embedded default, shareable by several router processes on one host.

One ``sqlite3`` connection lives on one dedicated thread and every store call is one hop to
that thread running a whole transaction (``docs/decisions/0003-store-drivers.md`` says why
not aiosqlite). Several processes may open the same file: WAL lets readers run beside the
single writer, every write transaction starts with ``BEGIN IMMEDIATE`` (take the write lock
before reading, so a read-modify-write such as a version bump cannot interleave) and
``busy_timeout`` makes a blocked writer wait instead of failing. ``synchronous=NORMAL`` in
WAL mode survives a crash of the process; a power loss may drop the last transactions.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

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
    now_ms,
    stamp_action,
)

T = TypeVar("T")

MEMORY = ":memory:"
#: ``OperationalError`` texts of an outage (the file, its disk or its lock), not of a bug
UNREACHABLE = ("unable to open", "locked", "disk I/O error", "readonly database")

#: (version, statements); append only, never edit an applied step.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE actions (
                namespace TEXT NOT NULL,
                name TEXT NOT NULL,
                updated INTEGER NOT NULL,
                doc TEXT NOT NULL,
                PRIMARY KEY (namespace, name))""",
            "CREATE INDEX actions_by_updated ON actions (namespace, updated DESC)",
            """CREATE TABLE activations (
                activation_id TEXT PRIMARY KEY,
                namespace TEXT NOT NULL,
                name TEXT NOT NULL,
                start INTEGER NOT NULL,
                doc TEXT NOT NULL)""",
            "CREATE INDEX activations_by_start ON activations (namespace, start DESC)",
            "CREATE INDEX activations_by_name ON activations (namespace, name, start DESC)",
        ],
    ),
    (
        2,
        [
            """CREATE TABLE in_flight (
                activation_id TEXT PRIMARY KEY,
                router_id TEXT NOT NULL,
                incarnation TEXT NOT NULL,
                doc TEXT NOT NULL)""",
            "CREATE INDEX in_flight_by_router ON in_flight (router_id)",
        ],
    ),
]

_UPSERT_ACTIVATION = """
    INSERT INTO activations (activation_id, namespace, name, start, doc) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (activation_id) DO UPDATE SET namespace = excluded.namespace,
        name = excluded.name, start = excluded.start, doc = excluded.doc"""
_INSERT_MISSING_ACTIVATION = """
    INSERT INTO activations (activation_id, namespace, name, start, doc) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (activation_id) DO NOTHING"""


class SQLiteStore:
    def __init__(self, path: str, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None

    # --- plumbing -----------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise StoreUnreachable("the SQLite store is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            text = str(exc)
            # a file gone or unreadable, or locked past the busy timeout: an outage
            if isinstance(exc, sqlite3.OperationalError) and any(w in text for w in UNREACHABLE):
                raise StoreUnreachable(f"SQLite ({self.path}): {exc}") from exc
            raise StoreError(f"SQLite ({self.path}): {exc}") from exc

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnreachable("the SQLite store is not open")
        return self._conn

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    # --- lifecycle ----------------------------------------------------------------------
    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        try:
            await self._call(self._open)
        except BaseException:
            await self.close()
            raise

    def _open(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn = conn
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        conn.execute("PRAGMA synchronous = NORMAL")
        # Switching a new file to WAL while another process migrates it can fail with
        # SQLITE_BUSY at once (SQLite skips the busy handler where it could deadlock).
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        for attempt in itertools.count(1):
            try:
                if self.path != MEMORY:
                    conn.execute("PRAGMA journal_mode = WAL")
                self._write(self._migrate)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(min(0.1, 0.005 * attempt))

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, statements in MIGRATIONS:
            if version in done:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now_ms()))

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)

    # --- actions ------------------------------------------------------------------------
    async def put_action(
        self, namespace: str, name: str, doc: dict[str, Any], *, overwrite: bool
    ) -> dict[str, Any]:
        def put(conn: sqlite3.Connection) -> dict[str, Any]:
            row = conn.execute(
                "SELECT doc FROM actions WHERE namespace = ? AND name = ?", (namespace, name)
            ).fetchone()
            if row is not None and not overwrite:
                raise Conflict(f"action {namespace}/{name} already exists")
            stored = stamp_action(namespace, name, doc, load_doc(row[0]) if row else None)
            conn.execute(
                "INSERT INTO actions (namespace, name, updated, doc) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (namespace, name) DO UPDATE SET "
                "updated = excluded.updated, doc = excluded.doc",
                (namespace, name, stored["updated"], dump_doc(stored)),
            )
            return stored

        return await self._call(self._write, put)

    async def get_action(self, namespace: str, name: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            row = self.conn.execute(
                "SELECT doc FROM actions WHERE namespace = ? AND name = ?", (namespace, name)
            ).fetchone()
            return load_doc(row[0]) if row else None

        return await self._call(get)

    async def get_action_json(self, namespace: str, name: str) -> str | None:
        def get() -> str | None:
            row = self.conn.execute(
                "SELECT doc FROM actions WHERE namespace = ? AND name = ?", (namespace, name)
            ).fetchone()
            return str(row[0]) if row else None

        return await self._call(get)

    async def list_actions(
        self, namespace: str, *, limit: int = 30, skip: int = 0
    ) -> list[dict[str, Any]]:
        check_page(limit, skip)

        def list_() -> list[dict[str, Any]]:
            rows = self.conn.execute(
                "SELECT json_remove(doc, '$.exec.code') FROM actions WHERE namespace = ? "
                "ORDER BY updated DESC, name LIMIT ? OFFSET ?",
                (namespace, limit or -1, skip),
            )
            return [load_doc(row[0]) for row in rows]

        return await self._call(list_)

    async def count_actions(self, namespace: str, *, skip: int = 0) -> int:
        check_page(0, skip)

        def count() -> int:
            row = self.conn.execute(
                "SELECT COUNT(*) FROM actions WHERE namespace = ?", (namespace,)
            ).fetchone()
            return counted(int(row[0]), skip)

        return await self._call(count)

    async def delete_action(self, namespace: str, name: str) -> dict[str, Any] | None:
        def delete(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(
                "DELETE FROM actions WHERE namespace = ? AND name = ? RETURNING doc",
                (namespace, name),
            ).fetchone()
            return load_doc(row[0]) if row else None

        return await self._call(self._write, delete)

    # --- activations --------------------------------------------------------------------
    async def put_activations(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        rows = [(*activation_key(r), dump_doc(r)) for r in dedupe_activations(records)]

        def put(conn: sqlite3.Connection) -> None:
            conn.executemany(_UPSERT_ACTIVATION, rows)
            conn.executemany("DELETE FROM in_flight WHERE activation_id = ?", [r[:1] for r in rows])

        await self._call(self._write, put)

    async def mark_in_flight(
        self, router_id: str, records: list[dict[str, Any]], *, incarnation: str = ""
    ) -> None:
        rows = [(activation_key(r)[0], router_id, incarnation, dump_doc(r)) for r in records]

        def mark(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO in_flight (activation_id, router_id, incarnation, doc) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (activation_id) DO UPDATE SET "
                "router_id = excluded.router_id, incarnation = excluded.incarnation, "
                "doc = excluded.doc",
                rows,
            )

        if rows:
            await self._call(self._write, mark)

    async def drop_in_flight(self, activation_ids: list[str]) -> None:
        def drop(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "DELETE FROM in_flight WHERE activation_id = ?", [(a,) for a in activation_ids]
            )

        if activation_ids:
            await self._call(self._write, drop)

    async def recover_in_flight(
        self, router_id: str, end_ms: int, *, incarnation: str | None = None
    ) -> list[dict[str, Any]]:
        def recover(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                "DELETE FROM in_flight WHERE router_id = ? "
                "AND (? IS NULL OR incarnation = ?) RETURNING doc",
                (router_id, incarnation, incarnation),
            ).fetchall()
            written = []
            for (doc,) in rows:
                record = finish_marked(load_doc(doc), end_ms)
                cursor = conn.execute(
                    _INSERT_MISSING_ACTIVATION, (*activation_key(record), dump_doc(record))
                )
                if cursor.rowcount:
                    written.append(record)
            return written

        return await self._call(self._write, recover)

    async def get_activation(self, namespace: str, activation_id: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            row = self.conn.execute(
                "SELECT doc FROM activations WHERE activation_id = ? AND namespace = ?",
                (activation_id, namespace),
            ).fetchone()
            return load_doc(row[0]) if row else None

        return await self._call(get)

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
        where, args = _activation_filter(namespace, name, since, upto)
        # without docs SQLite drops the large parts itself (the GIL is released meanwhile)
        column = "doc" if docs else "json_remove(doc, '$.logs', '$.response.result')"
        sql = (
            f"SELECT {column} FROM activations WHERE {where} "
            "ORDER BY start DESC, activation_id DESC LIMIT ? OFFSET ?"
        )
        args += [limit or -1, skip]

        def list_() -> list[dict[str, Any]]:
            return [load_doc(row[0]) for row in self.conn.execute(sql, args)]

        return await self._call(list_)

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
        where, args = _activation_filter(namespace, name, since, upto)

        def count() -> int:
            row = self.conn.execute(f"SELECT COUNT(*) FROM activations WHERE {where}", args)
            return counted(int(row.fetchone()[0]), skip)

        return await self._call(count)


def _activation_filter(
    namespace: str, name: str | None, since: int | None, upto: int | None
) -> tuple[str, list[Any]]:
    """The WHERE clause and arguments listing and counting activations share."""
    where = ["namespace = ?"]
    args: list[Any] = [namespace]
    for clause, value in (("name = ?", name), ("start >= ?", since), ("start <= ?", upto)):
        if value is not None:
            where.append(clause)
            args.append(value)
    return " AND ".join(where), args
