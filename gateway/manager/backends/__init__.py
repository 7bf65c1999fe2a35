"""Container backends, chosen by name and imported only when selected."""

from __future__ import annotations

import importlib
from typing import Any

from gateway.manager.backends.base import Backend

BACKENDS: dict[str, str] = {
    "local": "gateway.manager.backends.local:LocalProcessBackend",
    "kubernetes": "gateway.manager.backends.kubernetes:KubernetesBackend",
}


def load_backend(name: str, **options: Any) -> Backend:
    """Import ``BACKENDS[name]`` and construct it with ``options``."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}") from None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"backend {name!r} is not available: {exc}") from exc
    factory = getattr(module, attr)
    backend: Backend = factory(**options)
    return backend
