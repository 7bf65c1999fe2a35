"""What an app behind admission declares to it, as typed protocols (checked once, when the
middleware is built). Not compiled: mypyc turns protocols into native classes, which
``isinstance`` cannot check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from gateway.http.types import ASGIApp, Scope


@runtime_checkable
class AddsResponseHeaders(Protocol):
    """An app that sends ``RequestContext.response_headers`` with every response itself, so
    admission need not wrap its ``send`` (the proxy, the gateway's endpoints)."""

    @property
    def adds_response_headers(self) -> bool: ...


@runtime_checkable
class SelectsApp(Protocol):
    """An app that picks a lighter app per request (``LearningApp``: most requests skip its
    layer)."""

    def select(self, scope: Scope) -> ASGIApp: ...


def adds_response_headers(app: object) -> bool:
    return isinstance(app, AddsResponseHeaders) and bool(app.adds_response_headers)


def selector(app: object) -> Callable[[Scope], ASGIApp] | None:
    """``app.select`` when the app offers one (None: run the app itself)."""
    return app.select if isinstance(app, SelectsApp) else None
