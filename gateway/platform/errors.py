"""OpenWhisk-shaped API errors: ``{"error": <message>, "code": <transaction id>}``."""

from __future__ import annotations

import json
import uuid

NOT_FOUND = "The requested resource does not exist."
UNAUTHENTICATED = "The supplied authentication is invalid."
ALREADY_EXISTS = "resource already exists"


class ApiError(Exception):
    """An error the HTTP layer turns into an OpenWhisk error body with ``status``."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def not_authorized(namespace: str) -> ApiError:
    return ApiError(403, f"The supplied authentication is not authorized to access '{namespace}'.")


def new_transaction_id() -> str:
    return uuid.uuid4().hex


def error_body(message: str, code: str | None = None) -> bytes:
    return json.dumps({"error": message, "code": code or new_transaction_id()}).encode()
