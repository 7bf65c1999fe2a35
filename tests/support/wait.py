"""Waiting for a condition in tests: poll it with a bound, never sleep a guessed amount.

A sleep that IS the behaviour under test (an action that runs for a while, a slow upstream) is
fine; a sleep that hopes another thread, task or process got somewhere by then is not.

``wait_until`` / ``async_wait_until`` wait for a truthy condition; ``wait_for`` /
``async_wait_for`` wait for a value (anything but ``None``) and return it. Every wait fails with
``timed out after T s waiting for <what>``; ``what`` may be a function, called only then, to
show the state the wait gave up on. A check may also raise to fail at once (a process exited).
``interval`` is the pause between polls: the default suits a cheap check, a check that makes
HTTP requests to a server under test polls more slowly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")
POLL = 0.01

What = str | Callable[[], str]


def _timed_out(timeout: float, what: What) -> AssertionError:
    text = what() if callable(what) else what
    return AssertionError(f"timed out after {timeout} s waiting for {text}")


def wait_for(
    get: Callable[[], T | None],
    timeout: float = 10.0,
    what: What = "a value",
    interval: float = POLL,
) -> T:
    """Poll ``get`` (from a thread that may block) until it returns something but ``None``."""
    deadline = time.monotonic() + timeout
    while (value := get()) is None:
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what)
        time.sleep(interval)
    return value


def wait_until(
    cond: Callable[[], object],
    timeout: float = 10.0,
    what: What = "condition",
    interval: float = POLL,
) -> None:
    """Poll ``cond`` (from a thread that may block) until it is truthy or ``timeout`` passes."""
    wait_for(lambda: True if cond() else None, timeout, what, interval)


@overload
async def async_wait_for(
    get: Callable[[], Awaitable[T | None]],
    timeout: float = ...,  # noqa: ASYNC109 - the polling bound
    what: What = ...,
    interval: float = ...,
) -> T: ...
@overload
async def async_wait_for(
    get: Callable[[], T | None],
    timeout: float = ...,  # noqa: ASYNC109 - the polling bound
    what: What = ...,
    interval: float = ...,
) -> T: ...
async def async_wait_for(
    get: Callable[[], object],
    timeout: float = 15.0,  # noqa: ASYNC109 - the polling bound (generous: a loaded machine)
    what: What = "a value",
    interval: float = POLL,
) -> object:
    """Poll ``get`` (a plain or async function) on the event loop until it returns something
    but ``None``."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if isinstance(value, Awaitable):
            value = await value
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what)
        await asyncio.sleep(interval)


async def async_wait_until(
    cond: Callable[[], object | Awaitable[object]],
    timeout: float = 15.0,  # noqa: ASYNC109 - the polling bound (generous: a loaded machine)
    what: What = "condition",
    interval: float = POLL,
) -> None:
    """Poll ``cond`` (a plain or async predicate) on the event loop until it is truthy."""

    async def truthy() -> bool | None:
        value = cond()
        if isinstance(value, Awaitable):
            value = await value
        return True if value else None

    await async_wait_for(truthy, timeout, what, interval)
