"""Counting the items of a Kubernetes List body without building it (issue 21 item 9).

The front door learns collection sizes from the list responses it proxies. ``json.loads`` of
a whole body builds every item and, being C code that holds the GIL, blocks the event loop for
its whole run even in a thread (16 MiB: about a second). Here the top-level object is walked
key by key and each item decoded on its own (``raw_decode``) and dropped at once: in a worker
thread the interpreter can switch back to the event loop between two items, and only one item
is alive at a time. Only a JSON object whose ``kind`` ends in ``List`` and that has an
``items`` array counts; anything else (``None``) is not learned from.
"""

from __future__ import annotations

import json
import re
from typing import Final

# A Kubernetes List as kube-apiserver writes it starts with its kind (TypeMeta comes first).
_SHAPE: Final = re.compile(rb'\s*\{\s*"kind"\s*:\s*"[A-Za-z0-9]*List"')
SHAPE_BYTES: Final = 64  # enough of a body to check its shape
_decode = json.JSONDecoder().raw_decode


def looks_like_list(prefix: bytes) -> bool:
    """Whether a body starting with ``prefix`` can be a Kubernetes List (checked first, so
    that nothing else is buffered)."""
    return _SHAPE.match(prefix) is not None


def count_items(body: bytes) -> tuple[int, int] | None:
    """(items, ``metadata.remainingItemCount`` or 0) of a List, or None."""
    try:
        text = body.decode("utf-8")
        return _walk(text)
    except ValueError:  # not UTF-8, or not JSON (JSONDecodeError is a ValueError)
        return None


def _walk(text: str) -> tuple[int, int] | None:
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        return None
    items: int | None = None
    remaining = 0
    is_list = False
    i = _skip(text, i + 1)
    while text[i : i + 1] != "}":
        key, i = _decode(text, i)
        i = _skip(text, i)
        if not isinstance(key, str) or text[i : i + 1] != ":":
            return None
        i = _skip(text, i + 1)
        if key == "items":
            found = _count_array(text, i)
            if found is None:
                return None
            items, i = found
        else:
            value, i = _decode(text, i)
            if key == "kind":
                is_list = isinstance(value, str) and value.endswith("List")
            elif key == "metadata" and isinstance(value, dict):
                r = value.get("remainingItemCount")
                remaining = r if isinstance(r, int) and not isinstance(r, bool) and r > 0 else 0
        i = _skip(text, i)
        if text[i : i + 1] == ",":
            i = _skip(text, i + 1)
        elif text[i : i + 1] != "}":
            return None
    if _skip(text, i + 1) != len(text) or not is_list or items is None:
        return None
    return items, remaining


def _count_array(text: str, i: int) -> tuple[int, int] | None:
    """(elements, index after the array) of the array at ``i``, each element dropped."""
    if text[i : i + 1] != "[":
        return None
    i = _skip(text, i + 1)
    n = 0
    if text[i : i + 1] == "]":
        return 0, i + 1
    while True:
        _, i = _decode(text, i)
        n += 1
        i = _skip(text, i)
        c = text[i : i + 1]
        if c == "]":
            return n, i + 1
        if c != ",":
            return None
        i = _skip(text, i + 1)


def _skip(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not JSON whitespace."""
    n = len(text)
    while i < n and text[i] in " \t\n\r":
        i += 1
    return i
