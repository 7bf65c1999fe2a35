"""Per-activation ``__OW_*`` values that stay correct when several runs overlap.

With concurrency 1 the runtime also exports the values into ``os.environ`` (as every
OpenWhisk runtime does), so ordinary actions just read the environment. With concurrency
above 1 ``os.environ`` is shared by overlapping runs, so the runtime leaves the
per-activation keys out of it and actions read them here instead::

    from gateway.runtime.context import getenv
    getenv("__OW_ACTIVATION_ID")

The values live in a ``ContextVar`` set in the thread (sync ``main``) or task (async
``main``) that runs the activation, so each run sees only its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType

_EMPTY: Mapping[str, str] = MappingProxyType({})
_activation_env: ContextVar[Mapping[str, str]] = ContextVar("activation_env", default=_EMPTY)


def activation_env() -> Mapping[str, str]:
    """The ``__OW_*`` values of the activation running in the caller's context."""
    return _activation_env.get()


def getenv(name: str, default: str | None = None) -> str | None:
    """Like ``os.getenv`` but the current activation's own values win."""
    value = _activation_env.get().get(name)
    return value if value is not None else os.environ.get(name, default)


def set_activation_env(env: Mapping[str, str]) -> None:
    _activation_env.set(MappingProxyType(dict(env)))
