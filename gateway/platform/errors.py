"""OpenWhisk-shaped API errors: ``{"error": <message>, "code": <transaction id>}``.

Messages are OpenWhisk's own (``Messages`` in ``ErrorResponse.scala``, Akka's rejection texts the
controller wraps) so clients and scripts matching on them keep working. The front door uses the
same bodies for its own answers on OpenWhisk API paths (``gateway.asgi.errorformat``).
"""

from __future__ import annotations

import json
import uuid

NOT_FOUND = "The requested resource does not exist."
UNAUTHENTICATED = "The supplied authentication is invalid"
NO_CREDENTIALS = "The resource requires authentication, which was not supplied with the request"
ALREADY_EXISTS = "resource already exists"
INTERNAL_ERROR = "There was an internal server error."
SYSTEM_OVERLOADED = "System is overloaded, try again later."


class ApiError(Exception):
    """An error the HTTP layer turns into an OpenWhisk error body with ``status``."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def not_authorized(namespace: str) -> ApiError:
    return ApiError(403, f"The supplied authentication is not authorized to access '{namespace}'.")


def not_implemented(what: str) -> ApiError:
    """501 for the parts of OpenWhisk's API this platform does not have (docs/quickstart.md)."""
    return ApiError(501, f"{what} are not implemented by this platform.")


def too_many_concurrent(count: int, allowed: int) -> str:
    return f"Too many concurrent requests in flight (count: {count}, allowed: {allowed})."


def entity_too_big(field: str, size: int, allowed: int) -> str:
    return f"{field} larger than allowed: {size} > {allowed} bytes."


def method_not_allowed(allowed: list[str] | set[str] | tuple[str, ...]) -> str:
    return "HTTP method not allowed, supported methods: " + ", ".join(sorted(allowed))


def new_transaction_id() -> str:
    return uuid.uuid4().hex


def error_body(message: str, code: str | None = None) -> bytes:
    return json.dumps({"error": message, "code": code or new_transaction_id()}).encode()
