"""``/healthz``, ``/livez`` and ``/readyz``: answered before anything else, never queued.

Liveness never depends on the upstream; readiness turns false as soon as draining starts, so
load balancers stop sending new work while queued and executing requests finish.
"""

from __future__ import annotations

import enum

from gateway.http.status import send_bytes
from gateway.http.types import ASGIApp, Receive, Scope, Send

TEXT = b"text/plain; charset=utf-8"


class Phase(enum.Enum):
    STARTING = "starting"  # lifespan startup not finished
    READY = "ready"  # serving
    DRAINING = "draining"  # SIGTERM seen: finishing work, refusing queued requests
    STOPPED = "stopped"


class Lifecycle:
    def __init__(self) -> None:
        self.phase = Phase.STARTING

    @property
    def ready(self) -> bool:
        return self.phase is Phase.READY

    @property
    def draining(self) -> bool:
        return self.phase in (Phase.DRAINING, Phase.STOPPED)


class HealthEndpoints:
    PATHS = frozenset({"/healthz", "/livez", "/readyz"})

    def __init__(self, app: ASGIApp, *, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.PATHS:
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/readyz" and not self.lifecycle.ready:
            body = f"readyz check failed: {self.lifecycle.phase.value}\n".encode()
            await send_bytes(send, 503, body, TEXT)
            return
        await send_bytes(send, 200, b"ok", TEXT)
