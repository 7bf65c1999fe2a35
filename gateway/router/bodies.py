"""Request bodies: read within a limit, counted as they arrive, and parsed where a large one
cannot stall the router.

A body is refused with OpenWhisk's 413 (``Request larger than allowed: N > M bytes.``) as
soon as it is known to be too large: from ``Content-Length`` before anything is read, or, for a
chunked body, when the bytes received pass the limit (N is then what arrived so far). What
follows is not kept: aiohttp discards it for at most its lingering time (10 s, as nginx's
``lingering_close``) so the client reads the 413, then closes the connection.

JSON parsing holds the GIL from start to end (CPython's ``_json`` never releases it), so a
worker *thread* would stall the event loop as much as parsing inline (measured: 1.07 s for a
13 MB body of small objects). A body above ``INLINE_BYTES`` is therefore parsed and validated
in a worker *process* (``gateway.platform.action_body``), which hands back only a checked
action document (one large string, the code; parameters and annotations within 1 MiB) or the
error to answer; only the PUT of an action can be that large (an invoke's parameters are
within 1 MiB). An action with long code is serialized there too for the PUT's and GET's
answers. Decision 0014.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.platform.action_body import TOO_LARGE, action_document, dump, limit_worker, load
from gateway.platform.errors import ApiError, entity_too_big
from gateway.store import StoreError

log = logging.getLogger("gateway.router")

MAX_PAYLOAD_BYTES = 1024 * 1024  # OpenWhisk's whisk.activation.payload.max
MAX_ACTION_BYTES = 50 * 1024 * 1024  # OpenWhisk's controller max-content-length (code: 48 MiB)
MAX_PLATFORM_BYTES = 64 * 1024  # the manager's give-back requests
INLINE_BYTES = 256 * 1024  # parsed on the event loop below this (worst case a few ms)
DUMP_INLINE_CHARS = 1024 * 1024  # a document whose code is longer is serialized in the worker


async def read_limited(request: web.Request, limit: int, field: str = "Request") -> bytes:
    """The whole body, or 413 as soon as it is more than ``limit`` bytes."""
    declared = request.content_length
    if declared is not None and declared > limit:  # refused before reading it, as OpenWhisk
        raise ApiError(413, entity_too_big(field, declared, limit))
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, entity_too_big(field, len(body), limit))
    return bytes(body)


class Parser:
    """Action bodies parsed in one worker process, started on first use (``spawn``: a fresh
    interpreter, not a fork of the router with its connections and threads)."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    async def action(
        self, namespace: str, name: str, raw: bytes, allowed: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        if len(raw) <= INLINE_BYTES:
            got = action_document(namespace, name, raw, allowed)
        else:
            got = await self._in_worker(action_document, namespace, name, raw, allowed)
        if isinstance(got, tuple):
            raise ApiError(*got)
        return got

    async def loads(self, text: str) -> dict[str, Any]:
        """A stored action document (``Store.get_action_json``); a large one is parsed in the
        worker. ``StoreError`` if it is not a JSON object (a broken store)."""
        got = load(text) if len(text) <= INLINE_BYTES else await self._in_worker(load, text)
        if isinstance(got, tuple):
            raise StoreError(got[1])
        return got

    async def dumps(self, doc: dict[str, Any]) -> bytes:
        """``doc`` as JSON; in the worker when its code is long (escaping tens of MB holds
        the GIL for a second)."""
        code = (doc.get("exec") or {}).get("code") or ""
        if len(code) <= DUMP_INLINE_CHARS:
            return json.dumps(doc).encode()
        got: bytes | tuple[int, str] = await self._in_worker(dump, doc)
        if isinstance(got, tuple):
            raise ApiError(*got)
        return got

    async def _in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=limit_worker,
                initargs=(os.getpid(),),
            )
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        except concurrent.futures.process.BrokenProcessPool:
            log.error("the worker process for large JSON died; starting another")
            self.close()
            return 413, TOO_LARGE

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
