"""Waiting for a condition in tests: poll it with a bound, never sleep a guessed amount.

A sleep that IS the behaviour under test (an action that runs for a while, a slow upstream) is
fine; a sleep that hopes another thread, task or process got somewhere by then is not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL = 0.01


def wait_until(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``cond`` (from a thread that may block) until it is truthy or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)


async def async_wait_until(
    cond: Callable[[], object | Awaitable[object]],
    timeout: float = 15.0,  # noqa: ASYNC109 - the polling bound (generous: a loaded machine)
    what: str = "condition",
) -> None:
    """Poll ``cond`` (a plain or async predicate) on the event loop until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL)
