"""The client limits a server's connections read (kept apart from the uvicorn protocols so that
the ASGI app can hold them without importing uvicorn)."""

from __future__ import annotations

from gateway.settings.model import ClientSettings


class ClientLimits:
    """What new connections take (each keeps the values it started with); a reload swaps
    ``settings``."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
