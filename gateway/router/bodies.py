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
in a worker *process*, which hands back only a checked action document (one large string, the
code, and parameters within ``MAX_PARAMETER_BYTES``) or the error to answer; only the PUT of
an action can be that large (an invoke's parameters are within 1 MiB).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import multiprocessing
import resource
from typing import Any

from aiohttp import web

from gateway.platform.actions import validate_put
from gateway.platform.errors import ApiError, entity_too_big

log = logging.getLogger("gateway.router")

MAX_PAYLOAD_BYTES = 1024 * 1024  # OpenWhisk's whisk.activation.payload.max
MAX_ACTION_BYTES = 50 * 1024 * 1024  # OpenWhisk's controller max-content-length (code: 48 MiB)
MAX_PARAMETER_BYTES = 1024 * 1024  # OpenWhisk's whisk.parameter-size-limit
MAX_PLATFORM_BYTES = 64 * 1024  # the manager's give-back requests
INLINE_BYTES = 256 * 1024  # parsed on the event loop below this (worst case a few ms)
WORKER_MEMORY = 2 * 1024**3  # the parsing process's address space (RLIMIT_AS)
MALFORMED = "The request content was malformed:\n{}"


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


def parse_json(raw: bytes) -> Any:
    """A small body (within ``INLINE_BYTES``) parsed here; ``{}`` when empty."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, MALFORMED.format(exc)) from None


def check_action(doc: dict[str, Any]) -> dict[str, Any]:
    """OpenWhisk's size checks of an action beyond the code: parameters and annotations (and
    our pod template) each within ``MAX_PARAMETER_BYTES`` as serialized, else 413 naming the
    field; so the only large part of a stored action is its code."""
    for field in ("parameters", "annotations", "podTemplate"):
        size = len(json.dumps(doc.get(field) or [], separators=(",", ":")).encode())
        if size > MAX_PARAMETER_BYTES:
            raise ApiError(413, entity_too_big(field, size, MAX_PARAMETER_BYTES))
    return doc


def action_document(
    namespace: str, name: str, raw: bytes, allowed: frozenset[str] = frozenset()
) -> dict[str, Any] | tuple[int, str]:
    """Parse and validate a PUT body (``allowed``: the pod template fields tenants may set):
    the document, or ``(status, message)`` to answer (an exception would not survive the trip
    back from the worker process)."""
    try:
        body = parse_json(raw)
        return check_action(validate_put(namespace, name, body, allowed_template_fields=allowed))
    except ApiError as exc:
        return exc.status, exc.message
    except (MemoryError, RecursionError):
        return 413, "The request content is too large or too deeply nested to parse."


def _limit_worker() -> None:
    """The worker's own bound: a body of tiny objects costs it, never the router, memory."""
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))


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
            got = await self._in_worker(namespace, name, raw, allowed)
        if isinstance(got, tuple):
            raise ApiError(*got)
        return got

    async def _in_worker(
        self, namespace: str, name: str, raw: bytes, allowed: frozenset[str]
    ) -> dict[str, Any] | tuple[int, str]:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_limit_worker,
            )
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._pool, action_document, namespace, name, raw, allowed
            )
        except concurrent.futures.process.BrokenProcessPool:
            log.error("the process parsing action bodies died; starting another")
            self.close()
            return 413, "The request content is too large or too deeply nested to parse."

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
