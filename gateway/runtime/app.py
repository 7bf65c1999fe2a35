"""The two routes of the action-proxy protocol, as a plain ``(method, path, body)`` handler.

Status codes and messages (``platform-reference.md`` section 3; where OpenWhisk's proxies
disagree we follow the one named):

- ``POST /init``: 200 ``{"ok": true}``; 403 on a second successful init (all proxies), whose
  body also carries ``digest``, the ``init_digest`` of the code the runtime holds, so that a
  router re-adopting a container can check it runs the expected code; 403
  ``"Missing main/no code to execute."`` for empty code (Go proxy); 400 for a body that is not
  JSON / base64; 502 when the code fails to compile or execute, or ``main`` is missing.
  A failed init may be retried (the invoker destroys such a container anyway).
- ``POST /run``: 200 with the dict ``main`` returned; 502 ``{"error": ...}`` when ``main``
  raises or returns something other than a JSON-serialisable dict; 502 before init
  (``actionproxy.py``'s text); 400 when ``value`` is not an object.
- After every init and run, the sentinel line goes to stdout and stderr (``SENTINEL``).

The deadline (``__OW_DEADLINE``) is only exported: the router enforces the time limit by
destroying the container, as the OpenWhisk invoker does.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from gateway.runtime import SENTINEL
from gateway.runtime.action import Action, ActionError, load_binary, load_source, run_env

NOT_INITIALIZED = "The action failed to locate a binary. See logs for details."
ALREADY_INITIALIZED = "Cannot initialize the action more than once."


def _error(status: int, message: str, **extra: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": message, **extra}).encode()


def init_digest(value: dict[str, Any]) -> str:
    """A digest of an ``/init`` value (code, main, binary, env), computed alike by the router
    from what it sends and by the runtime from what it received."""
    import hashlib  # noqa: PLC0415 - cold start

    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def write_sentinels() -> None:
    for stream in (sys.stdout, sys.stderr):
        stream.write(SENTINEL + "\n")
        stream.flush()


class Runtime:
    """``concurrency`` None means: 1, or ``DEFAULT_CONCURRENT`` if ``__OW_ALLOW_CONCURRENT``."""

    DEFAULT_CONCURRENT = 64

    def __init__(self, concurrency: int | None = None) -> None:
        self._concurrency = concurrency
        self._action: Action | None = None
        self._digest = ""
        self._init_lock = threading.Lock()

    def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if path not in ("/init", "/run"):
            return _error(404, f"Unknown path {path}: only POST /init and POST /run exist.")
        if method != "POST":
            return _error(405, f"Method {method} not allowed: use POST {path}.")
        try:
            message = json.loads(body) if body else {}
        except ValueError as exc:
            return _error(400, f"Error unmarshaling request: {exc}")
        if not isinstance(message, dict):
            return _error(400, "Error unmarshaling request: the body must be a JSON object.")
        try:
            if path == "/init":
                return self.init(message)
            return self.run(message)
        finally:
            write_sentinels()

    def concurrency(self) -> int:
        if self._concurrency is not None:
            return self._concurrency
        if os.environ.get("__OW_ALLOW_CONCURRENT", "").lower() == "true":
            return self.DEFAULT_CONCURRENT
        return 1

    def init(self, message: dict[str, Any]) -> tuple[int, bytes]:
        value = message.get("value")
        if not isinstance(value, dict):
            return _error(400, 'The init body must be {"value": {...}}.')
        with self._init_lock:
            if self._action is not None:
                return _error(403, ALREADY_INITIALIZED, digest=self._digest)
            code = value.get("code")
            if not isinstance(code, str) or not code:
                return _error(403, "Missing main/no code to execute.")
            env = value.get("env") or {}
            if not isinstance(env, dict):
                return _error(400, "The init env must be an object of strings.")
            os.environ.update(
                {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in env.items()}
            )
            main_name = value.get("main") or "main"
            try:
                if value.get("binary"):
                    main = load_binary(code, main_name)
                else:
                    main = load_source(code, "<action>", main_name)
            except ActionError as exc:
                return _error(exc.status, exc.message)
            self._action = Action(main, self.concurrency())
            self._digest = init_digest(value)
        return 200, b'{"ok": true}'

    def run(self, message: dict[str, Any]) -> tuple[int, bytes]:
        action = self._action
        if action is None:
            return _error(502, NOT_INITIALIZED)
        params = message.get("value", {})
        if not isinstance(params, dict):
            return _error(400, "The action did not receive a dictionary as an argument.")
        try:
            result = action.call(params, run_env(message))
        except ActionError as exc:
            return _error(exc.status, exc.message)
        if not isinstance(result, dict):
            return _error(502, "The action did not return a dictionary.")
        try:
            return 200, json.dumps(result).encode()
        except (TypeError, ValueError) as exc:
            return _error(502, f"The action did not return a JSON-serialisable dictionary: {exc}")
