"""Give freed heap memory back to the OS after a burst (glibc's ``malloc_trim``).

Python frees a request body's bytes when the request ends, but glibc keeps the pages in its
arenas: after 400 queued uploads the front door stayed at its peak RSS though nothing was held
any more (issue 21 item 6; docs/performance.md, "Queued request bodies"). ``malloc_trim(0)``
returns the free pages of every arena. Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_memory() -> bool:
    """True if the C library was asked to return free memory."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
