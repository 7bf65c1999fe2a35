"""Request IDs: a client's value is kept when it is a safe token, otherwise one is generated.

Safe means 1 to 128 visible ASCII characters (0x21-0x7E): nothing that could split a log
line or a header, and a bounded length. A generated ID is 32 hex digits of randomness, as
nginx's ``$request_id``.
"""

from __future__ import annotations

import os
from typing import Final

MAX_LENGTH: Final = 128
_VISIBLE: Final = bytes(range(0x21, 0x7F))


def is_safe(value: bytes) -> bool:
    # translate(None, delete) leaves only the bytes that are not visible ASCII
    return 0 < len(value) <= MAX_LENGTH and not value.translate(None, _VISIBLE)


def new_id() -> tuple[bytes, str]:
    """A generated ID, for the headers and for the log (its text: no decoding per line)."""
    text = os.urandom(16).hex()
    return text.encode("ascii"), text


def request_id(headers: list[tuple[bytes, bytes]], name: bytes) -> tuple[bytes, str, bool]:
    """(the request's ID, its text, whether the client sent it as one safe value). Several
    values of the header are not one ID: a new one replaces them all."""
    found: bytes | None = None
    for n, v in headers:
        if n == name:
            if found is not None:
                rid, text = new_id()
                return rid, text, False
            found = v
    if found is not None and is_safe(found):
        return found, found.decode("ascii"), True
    rid, text = new_id()
    return rid, text, False
