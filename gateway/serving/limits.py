"""The client limits a server's connections read (kept apart from the uvicorn protocols so that
the ASGI app can hold them without importing uvicorn)."""

from __future__ import annotations

from gateway.settings.model import ClientSettings, GatewaySettings

# Why the gateway closed a client connection (idle keep-alive closes are not counted).
# On HTTP/2, body_timeout and send_timeout may reset one stream rather than close; the http2_
# reasons are GOAWAYs for bad framing or a passed limit, rapid reset, and a PING/SETTINGS flood.
CLOSE_REASONS = (
    "header_timeout", "body_timeout", "send_timeout", "head_too_large", "over_capacity",
    "http2_protocol_error", "http2_rapid_reset", "http2_control_flood",
)  # fmt: skip


class ClientLimits:
    """What new connections take (each keeps the values it started with); a reload swaps
    ``settings``. ``closed`` counts the connections the limits closed, by reason."""

    def __init__(self, settings: ClientSettings, *, peer_certificates: bool = False) -> None:
        self.settings = settings
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)
        # TLS connections put the client's certificate in each request's scope (set at start:
        # the listener asks for certificates only when a client CA bundle is configured).
        self.peer_certificates = peer_certificates


# Descriptors beside client and upstream connections: listening socket, logs, config files.
SPARE_FILES = 64


def file_limit_warning(settings: GatewaySettings, soft_limit: int) -> str | None:
    """A warning when ``RLIMIT_NOFILE`` is below what ``client.maxConnections`` plus the
    upstream pool need: past it, accept() fails instead of the cap answering 503."""
    need = settings.client.max_connections + settings.server_concurrency_limit + SPARE_FILES
    if soft_limit < 0 or soft_limit >= need:  # RLIM_INFINITY is -1
        return None
    return (
        f"open file limit {soft_limit} is below client.maxConnections "
        f"({settings.client.max_connections}) + upstream pool "
        f"({settings.server_concurrency_limit}) + {SPARE_FILES}; raise it (ulimit -n {need}) "
        "or lower client.maxConnections"
    )
