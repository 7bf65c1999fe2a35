"""The ``/init`` request of a cold container, encoded a slice of the code at a time.

An action's code may be 48 MiB; escape-heavy code (quotes, newlines) takes ``json.dumps``
about a second, holding the GIL all along, and ``/init`` is sent from the router's event loop,
which also renews its lease. Escaping is per character, so the code is encoded in slices of
``SLICE_CHARS`` with the loop free between them (each slice a few ms): the same bytes as one
``json.dumps``, never a long hold. The digest a container reports when it was initialised
before (``gateway.runtime.app.init_digest``) is computed the same way. Decision 0024.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

SLICE_CHARS = 256 * 1024  # of escape-heavy code: about 6 ms of json.dumps


def pieces(
    value: dict[str, Any], key: str, slice_chars: int = SLICE_CHARS, **kw: Any
) -> Iterator[str]:
    """``json.dumps(value, **kw)`` in pieces, the long string ``value[key]`` a slice at a time;
    each piece is encoded only when asked for (the caller yields to the loop in between)."""
    long = value.get(key)
    if not isinstance(long, str):
        raise ValueError(f"{key!r} is not a string member of the value")
    hole = "\x00" + secrets.token_hex(16)  # in no other string of ``value``
    head, _, tail = json.dumps({**value, key: hole}, **kw).partition(json.dumps(hole))
    yield head + '"'
    ascii_only = kw.get("ensure_ascii", True)
    for start in range(0, len(long), slice_chars):
        yield json.dumps(long[start : start + slice_chars], ensure_ascii=ascii_only)[1:-1]
    yield '"' + tail


async def init_body(value: dict[str, Any]) -> AsyncIterator[bytes]:
    """``{"value": value}`` as JSON, a slice of ``value["code"]`` at a time: sent as it is
    encoded (a chunked body), so 48 MB are never joined, nor copied whole into the socket's
    buffer, on the loop."""
    yield b'{"value": '
    for piece in pieces(value, "code"):
        yield piece.encode()
        await asyncio.sleep(0)  # let the loop serve between slices
    yield b"}"


async def init_digest(value: dict[str, Any]) -> str:
    """``gateway.runtime.app.init_digest(value)``, a slice of the code at a time."""
    digest = hashlib.sha256()
    canonical = pieces(value, "code", sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    for piece in canonical:
        digest.update(piece.encode())
        await asyncio.sleep(0)
    return "sha256:" + digest.hexdigest()
