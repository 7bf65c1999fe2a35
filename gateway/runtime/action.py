"""Loading an action's code once and calling its ``main`` per activation.

Errors are ``ActionError(status, message)``; ``app`` turns them into ``{"error": message}``
responses. Tracebacks go to stderr, so they end up in the activation's logs.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.runtime.context import set_activation_env

if TYPE_CHECKING:
    from concurrent.futures import Future

MODULE_NAME = "main__"


class ActionError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _is_coroutine_function(fn: Callable[..., Any]) -> bool:
    """``inspect.iscoroutinefunction`` without importing ``inspect`` (a cold-start cost)."""
    code = getattr(fn, "__code__", None)
    return code is not None and bool(code.co_flags & 0x80)  # CO_COROUTINE


def _print_traceback() -> None:
    import traceback  # noqa: PLC0415 - cold start

    traceback.print_exc(file=sys.stderr)


def load_source(source: str, filename: str, main_name: str) -> Callable[..., Any]:
    """Execute ``source`` as module ``main__`` and return its entry point."""
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = filename
    sys.modules[MODULE_NAME] = module
    if not os.path.exists(filename):  # let tracebacks show source lines of inline code
        import linecache  # noqa: PLC0415 - cold start

        lines = source.splitlines(keepends=True)
        linecache.cache[filename] = (len(source), None, lines, filename)
    try:
        code = compile(source, filename, "exec")
        exec(code, module.__dict__)
    except BaseException as exc:
        _print_traceback()
        raise ActionError(502, f"Initialization has failed due to: {_describe(exc)}") from exc
    main = module.__dict__.get(main_name)
    if not callable(main):
        raise ActionError(502, f"Action entrypoint '{main_name}' is not found or not callable.")
    return main  # type: ignore[no-any-return]


def load_binary(payload: str, main_name: str) -> Callable[..., Any]:
    """A base64 zip with ``__main__.py`` at its root (optionally a ``virtualenv/``)."""
    import base64  # noqa: PLC0415 - cold start
    import binascii  # noqa: PLC0415 - cold start
    import io  # noqa: PLC0415 - cold start
    import zipfile  # noqa: PLC0415 - cold start

    try:
        data = base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise ActionError(400, f"Cannot decode the base64 action code: {exc}") from exc
    if not zipfile.is_zipfile(io.BytesIO(data)):
        try:
            return load_source(data.decode("utf-8"), "<action>", main_name)
        except UnicodeDecodeError:
            raise ActionError(502, "Binary code is neither a zip file nor Python source.") from None
    import glob  # noqa: PLC0415 - cold start
    import tempfile  # noqa: PLC0415 - cold start

    root = tempfile.mkdtemp(prefix="action-")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            archive.extractall(root)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ActionError(502, f"Cannot unpack the zip file: {exc}") from exc
    entry = os.path.join(root, "__main__.py")
    if not os.path.isfile(entry):
        raise ActionError(502, "Zip file does not include __main__.py at its root.")
    sys.path.insert(0, root)
    for site in glob.glob(os.path.join(root, "virtualenv", "lib", "python3*", "site-packages")):
        sys.path.insert(1, site)
    with open(entry, encoding="utf-8") as f:
        source = f.read()
    return load_source(source, entry, main_name)


def run_env(body: Mapping[str, Any]) -> dict[str, str]:
    """Every key of the ``/run`` body except ``value`` becomes ``__OW_<KEY>``."""
    return {f"__OW_{key.upper()}": _as_env(value) for key, value in body.items() if key != "value"}


def _as_env(value: Any) -> str:
    if isinstance(value, str):
        return value
    import json  # noqa: PLC0415 - cold start

    return json.dumps(value)


class Action:
    """A loaded entry point plus the concurrency it may be called with.

    Sync ``main`` runs in the caller's thread (one per connection); async ``main`` runs on
    one event loop thread started at init. A semaphore of size ``concurrency`` bounds both,
    so ``concurrency == 1`` serialises runs as OpenWhisk guarantees.
    """

    def __init__(self, main: Callable[..., Any], concurrency: int) -> None:
        self.main = main
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._loop: Any = None
        if _is_coroutine_function(main):
            import asyncio  # noqa: PLC0415 - cold start

            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True).start()

    def call(self, params: dict[str, Any], env: dict[str, str]) -> Any:
        """Run ``main(params)`` with the activation's env; raise ``ActionError`` on failure."""
        with self._slots:
            if self.concurrency == 1:
                os.environ.update(env)
            try:
                if self._loop is None:
                    set_activation_env(env)
                    return self.main(params)
                return self._call_async(params, env).result()
            except Exception as exc:
                _print_traceback()
                raise ActionError(502, _describe(exc)) from exc
            except SystemExit as exc:
                raise ActionError(502, f"The action exited (sys.exit({exc.code!r})).") from exc

    def _call_async(self, params: dict[str, Any], env: dict[str, str]) -> Future[Any]:
        import asyncio  # noqa: PLC0415 - cold start

        async def activation() -> Any:
            set_activation_env(env)  # task-local: each task runs in its own context copy
            return await self.main(params)

        return asyncio.run_coroutine_threadsafe(activation(), self._loop)
