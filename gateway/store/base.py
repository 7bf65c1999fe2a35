"""The store contract shared by the router and the manager, and helpers every driver uses.

Exceptions::

    StoreError          anything a store cannot do (bad URL, corrupt row, missing table)
    ├── StoreUnreachable  it did not answer (connection refused or lost, not open, locked)
    └── Conflict        put_action(overwrite=False) on an action that exists

Documents are plain JSON-able dicts shaped like OpenWhisk's REST API (``platform-reference.md``
section 2). A store keeps them whole as JSON and indexes only what it filters or sorts on.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol


class StoreError(Exception):
    """Base of every store failure."""


class StoreUnreachable(StoreError):
    """The store could not be reached: connection refused or lost, not open, shutting down,
    out of connections, locked past the busy timeout. An outage (the router serves what it
    knows and answers 503), not a broken store (500)."""


class Conflict(StoreError):
    """The action exists and ``overwrite`` was false (OpenWhisk answers 409)."""


class Store(Protocol):
    async def open(self) -> None:
        """Connect and create the schema / apply pending migrations; safe to race."""
        ...

    async def close(self) -> None: ...

    async def put_action(
        self, namespace: str, name: str, doc: dict[str, Any], *, overwrite: bool
    ) -> dict[str, Any]:
        """Store ``doc`` and return it with ``namespace``, ``name``, ``version`` (``0.0.1``
        on create, patch bumped on overwrite) and ``updated`` (epoch ms) set.
        Raises ``Conflict`` if it exists and ``overwrite`` is false."""
        ...

    async def get_action(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def get_action_json(self, namespace: str, name: str) -> str | None:
        """The stored document as its JSON text, unparsed: the router parses a large one (tens
        of MB of code) in its worker process, not on its event loop."""
        ...

    async def list_actions(
        self, namespace: str, *, limit: int = 30, skip: int = 0
    ) -> list[dict[str, Any]]:
        """Most recently updated first, as OpenWhisk lists them; without ``exec.code``, which
        the database drops (a page of 200 actions of 48 MiB code never reaches the router)."""
        ...

    async def count_actions(self, namespace: str, *, skip: int = 0) -> int:
        """How many actions a listing from ``skip`` on holds (OpenWhisk's ``count=true``)."""
        ...

    async def delete_action(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The deleted document, or None if there was none."""
        ...

    async def put_activations(self, records: list[dict[str, Any]]) -> None:
        """Insert or replace by ``activationId``: writing a record twice keeps one copy."""
        ...

    async def get_activation(self, namespace: str, activation_id: str) -> dict[str, Any] | None: ...

    async def mark_in_flight(
        self, router_id: str, records: list[dict[str, Any]], *, incarnation: str = ""
    ) -> None:
        """Durably note activations ``router_id`` (the process ``incarnation``) is about to
        run, each with the record to write if the router dies first. ``put_activations`` of
        the same id removes the mark in the same transaction, so one of the two exists."""
        ...

    async def drop_in_flight(self, activation_ids: list[str]) -> None:
        """Remove marks of activations that ended without a record here (a peer ran them)."""
        ...

    async def recover_in_flight(
        self, router_id: str, end_ms: int, *, incarnation: str | None = None
    ) -> list[dict[str, Any]]:
        """A router process is gone: write the marked records of ``router_id`` (only of
        ``incarnation`` if given) that have no activation record (ending at ``end_ms``),
        remove those marks, return what was written."""
        ...

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
        """Newest ``start`` first; ``since``/``upto`` bound ``start`` inclusively (epoch ms).
        Without ``docs`` the records come without ``logs`` and ``response.result``, dropped
        by the database (a listing never carries the large parts to the router)."""
        ...

    async def count_activations(
        self,
        namespace: str,
        *,
        skip: int = 0,
        name: str | None = None,
        since: int | None = None,
        upto: int | None = None,
    ) -> int:
        """How many records ``list_activations`` with these filters holds from ``skip`` on."""
        ...


FIRST_VERSION = "0.0.1"


def now_ms() -> int:
    return int(time.time() * 1000)


def next_version(previous: str | None) -> str:
    """``0.0.1`` -> ``0.0.2`` (OpenWhisk bumps the patch level on every update)."""
    if not previous:
        return FIRST_VERSION
    parts = previous.split(".")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        return FIRST_VERSION
    if len(numbers) != 3:
        return FIRST_VERSION
    return f"{numbers[0]}.{numbers[1]}.{numbers[2] + 1}"


def stamp_action(
    namespace: str, name: str, doc: dict[str, Any], previous: dict[str, Any] | None
) -> dict[str, Any]:
    stored = dict(doc)
    stored["namespace"] = namespace
    stored["name"] = name
    stored["version"] = next_version(previous.get("version") if previous else None)
    updated = now_ms()
    if previous is not None:  # keep "updated" strictly increasing for the list order
        updated = max(updated, int(previous.get("updated", 0)) + 1)
    stored["updated"] = updated
    return stored


def counted(total: int, skip: int) -> int:
    """A count from ``skip`` on: what a listing that skips that many would hold."""
    return max(0, total - skip)


def check_page(limit: int, skip: int) -> None:
    if limit < 0 or skip < 0:
        raise StoreError(f"limit and skip must be >= 0 (got limit={limit}, skip={skip})")


def activation_key(record: dict[str, Any]) -> tuple[str, str, str, int]:
    """The indexed columns of an activation record: (id, namespace, name, start)."""
    try:
        return (
            str(record["activationId"]),
            str(record["namespace"]),
            str(record["name"]),
            int(record["start"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(
            "an activation record needs activationId, namespace, name and an integer start: "
            f"{exc!r}"
        ) from exc


def dedupe_activations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last record per activationId (an upsert batch may not touch a row twice)."""
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        latest[activation_key(record)[0]] = record
    return list(latest.values())


def finish_marked(record: dict[str, Any], end_ms: int) -> dict[str, Any]:
    """The failure record kept with an in-flight mark, ended at ``end_ms``."""
    done = dict(record)
    start = int(done.get("start", end_ms))
    done["end"] = max(start, end_ms)
    done["duration"] = done["end"] - start
    return done


def dump_doc(doc: dict[str, Any]) -> str:
    """A document as the stores keep it: compact JSON."""
    return json.dumps(doc, separators=(",", ":"))


def load_doc(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise StoreError("a stored document is not a JSON object")
    return doc
