"""Parsing and checking an action's create/update body, and serializing a large document: pure
functions the router runs inline for small bodies and in its worker process for large ones
(``gateway.router.bodies``), so this module imports nothing heavy (the worker is a fresh
interpreter that imports it)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
from typing import Any

from gateway.platform.actions import validate_put
from gateway.platform.errors import ApiError, entity_too_big

MAX_PARAMETER_BYTES = 1024 * 1024  # OpenWhisk's whisk.parameter-size-limit
WORKER_MEMORY = 2 * 1024**3  # the worker process's address space (RLIMIT_AS)
MALFORMED = "The request content was malformed:\n{}"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
TOO_LARGE = "The request content is too large or too deeply nested to parse."


def parse_json(raw: bytes) -> Any:
    """A body as JSON (``{}`` when empty), or 400 with OpenWhisk's text."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, MALFORMED.format(exc)) from None


def check_action(doc: dict[str, Any]) -> dict[str, Any]:
    """OpenWhisk's size checks of an action beyond the code: parameters and annotations (and
    our pod template) each within ``MAX_PARAMETER_BYTES`` as serialized, else 413 naming the
    field; so the only large part of a stored action is its code."""
    for field in ("parameters", "annotations", "podTemplate"):
        size = len(json.dumps(doc.get(field) or [], separators=(",", ":")).encode())
        if size > MAX_PARAMETER_BYTES:
            raise ApiError(413, entity_too_big(field, size, MAX_PARAMETER_BYTES))
    return doc


def action_document(
    namespace: str, name: str, raw: bytes, allowed: frozenset[str] = frozenset()
) -> dict[str, Any] | tuple[int, str]:
    """Parse and validate a PUT body (``allowed``: the pod template fields tenants may set):
    the document, or ``(status, message)`` to answer (an exception would not survive the trip
    back from the worker process)."""
    try:
        body = parse_json(raw)
        return check_action(validate_put(namespace, name, body, allowed_template_fields=allowed))
    except ApiError as exc:
        return exc.status, exc.message
    except (MemoryError, RecursionError):
        return 413, TOO_LARGE


def limit_worker(parent: int) -> None:
    """The worker's own bounds: a body of tiny objects costs it, never the router, memory;
    and it dies with the router (``PR_SET_PDEATHSIG``), even one killed outright: it holds
    both ends of its task pipe, so it would never see the router go."""
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the router died before prctl: nobody would signal us
        os._exit(1)


def dump(doc: dict[str, Any]) -> bytes | tuple[int, str]:
    """``doc`` as JSON bytes (or the error to answer if the worker runs out of memory)."""
    try:
        return json.dumps(doc).encode()
    except MemoryError:
        return 413, TOO_LARGE


def load(text: str) -> dict[str, Any] | tuple[int, str]:
    """A stored action document parsed, or ``(500, why)`` if it is not a JSON object."""
    try:
        doc = json.loads(text)
    except (ValueError, MemoryError, RecursionError) as exc:
        return 500, f"a stored action is not valid JSON: {exc}"
    return doc if isinstance(doc, dict) else (500, "a stored action is not a JSON object")
