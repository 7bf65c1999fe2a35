"""The shape of the front door's own errors on a path: Kubernetes ``Status`` by default, or
OpenWhisk's ``{"error", "code"}`` on routes marked ``errorFormat: openwhisk``.

A 401 for a wrong API key or a 429 from admission is answered before the request reaches its
upstream, so without this an OpenWhisk client would get a body it cannot read. Only the error
paths consult the route, so admitted requests pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gateway.asgi.authn import Unauthorized
from gateway.asgi.refusal import RequestRefused, send_refusal
from gateway.http.status import JSON_CONTENT_TYPE, send_bytes
from gateway.http.types import Scope, Send
from gateway.platform.errors import (
    NO_CREDENTIALS,
    SYSTEM_OVERLOADED,
    UNAUTHENTICATED,
    error_body,
    too_many_concurrent,
)

KUBERNETES: Final = "kubernetes"
OPENWHISK: Final = "openwhisk"
# path -> error format of the route that serves it
PathFormat = Callable[[str], str]

# Akka's default texts for these statuses (OpenWhisk's controller answers with them).
BAD_GATEWAY = (
    "The server was acting as a gateway or proxy and received an invalid response from the "
    "upstream server."
)
GATEWAY_TIMEOUT = (
    "The server was acting as a gateway or proxy and did not receive a timely response from the "
    "upstream server."
)


def is_openwhisk(error_format: PathFormat | None, scope: Scope) -> bool:
    return error_format is not None and error_format(scope["path"]) == OPENWHISK


async def send_openwhisk_error(
    send: Send, code: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_bytes(send, code, error_body(message), JSON_CONTENT_TYPE, headers)


async def send_refused(
    scope: Scope, send: Send, exc: RequestRefused, error_format: PathFormat | None
) -> None:
    """A refusal before admission in the path's shape; OpenWhisk tells a missing key from a
    wrong one as its controller does."""
    if not is_openwhisk(error_format, scope):
        await send_refusal(send, exc)
    elif isinstance(exc, Unauthorized):
        presented = any(name == b"authorization" for name, _ in scope["headers"])
        await send_openwhisk_error(send, 401, UNAUTHENTICATED if presented else NO_CREDENTIALS)
    else:
        await send_openwhisk_error(send, exc.code, exc.prefix + str(exc))


def throttled_message(in_flight: int, allowed: int, *, shutting_down: bool = False) -> str:
    """OpenWhisk's 429 texts: the concurrency throttle's, or its overload text on shutdown."""
    return SYSTEM_OVERLOADED if shutting_down else too_many_concurrent(in_flight, allowed)


async def send_openwhisk_too_many(
    send: Send, retry_after: int, message: str, headers: list[tuple[bytes, bytes]] | None
) -> None:
    extra = [(b"retry-after", str(max(1, retry_after)).encode())]
    if headers:
        extra.extend(headers)
    await send_openwhisk_error(send, 429, message, extra)
