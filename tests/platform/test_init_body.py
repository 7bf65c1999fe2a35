"""The ``/init`` body and digest encoded a slice of the code at a time are exactly what one
``json.dumps`` gives (and what the runtime computes), whatever the slice boundaries cut."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.router.initbody import SLICE_CHARS, init_body, init_digest, pieces
from gateway.runtime import app as runtime

CODES = [
    "def main(a):\n    return a\n",
    '#"\n\\' * 1000,  # escape-heavy
    "é ü 日本 \U0001f600 \u2028 \x00 \x1f" * 300,  # non-ASCII, astral, control characters
    "x",
]


def value(code: str) -> dict[str, Any]:
    env = {"__OW_NAMESPACE": "guest", "__OW_ACTION_NAME": "/guest/a", "__OW_ACTION_VERSION": "1"}
    return {"name": "a", "main": "main", "code": code, "binary": False, "env": env}


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("size", [1, 7, 4096, 10**9])
def test_pieces_join_to_one_dumps(code: str, size: int) -> None:
    v = value(code)
    assert "".join(pieces(v, "code", size)) == json.dumps(v)
    canonical = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}
    assert "".join(pieces(v, "code", size, **canonical)) == json.dumps(v, **canonical)


@pytest.mark.parametrize("code", CODES)
async def test_body_and_digest_match_the_runtime(code: str) -> None:
    v = value(code)
    body = b"".join([piece async for piece in init_body(v)])
    assert body == json.dumps({"value": v}).encode()
    assert json.loads(body) == {"value": v}
    assert await init_digest(v) == runtime.init_digest(v)


async def test_a_large_code_is_sent_a_slice_at_a_time() -> None:
    """48 MB are never one piece: each is at most a slice of code, escaped (6 bytes a char at
    worst), so the loop is never held for more than one slice's encoding."""
    code = '"\\' * (4 * SLICE_CHARS)
    sizes = [len(piece) async for piece in init_body(value(code))]
    assert len(sizes) > 8 and max(sizes) <= 6 * SLICE_CHARS + 200, sizes[:5]


def test_the_long_member_must_be_a_string() -> None:
    with pytest.raises(ValueError, match="'code' is not a string member"):
        list(pieces({"code": 5}, "code"))
