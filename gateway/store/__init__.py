"""Actions and activation records: SQLite (embedded default) or PostgreSQL (shared).

``open_store(url)`` picks the driver by URL scheme and imports it lazily, so asyncpg is
needed only for PostgreSQL:

- ``sqlite:///abs/path.db`` (a relative ``sqlite://rel.db`` also works), ``sqlite://:memory:``
- ``postgresql://user@host:port/db?schema=name`` (``schema`` defaults to ``public``)
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from gateway.store.base import Conflict, Store, StoreError, StoreUnreachable
from gateway.store.writer import ActivationWriter

__all__ = ["ActivationWriter", "Conflict", "Store", "StoreError", "StoreUnreachable", "open_store"]


def open_store(url: str) -> Store:
    """A store for ``url``, not yet opened (call ``await store.open()``)."""
    if url.startswith("sqlite://"):
        from gateway.store.sqlite import MEMORY, SQLiteStore  # noqa: PLC0415 - the store the URL names

        path = url[len("sqlite://") :]
        if path in (MEMORY, "/" + MEMORY):
            return SQLiteStore(MEMORY)
        if not path:
            raise StoreError(f"no database file in {url!r}: use sqlite:///abs/path.db")
        return SQLiteStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        from gateway.store.postgres import PostgresStore  # noqa: PLC0415 - the store the URL names

        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = next((v for k, v in query if k == "schema"), "public")
        rest = urlencode([(k, v) for k, v in query if k != "schema"])
        return PostgresStore(urlunsplit(parts._replace(query=rest)), schema=schema)
    raise StoreError(f"unsupported store URL {url!r}: use sqlite://... or postgresql://...")
