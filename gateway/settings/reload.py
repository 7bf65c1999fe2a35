"""Hot reload: poll the watched files and listen for SIGHUP; apply only whole, valid configs.

Polling (mtime, size, inode) works on every filesystem, including Kubernetes ConfigMap volumes
whose files change by symlink swap. Reading, parsing, validating and preparing a new
configuration (credential files included) run in a worker thread, so a large or hostile file
never stalls requests; only the final swap runs on the event loop. A refused load is logged
with its errors and reason, and the last good configuration keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.settings.guard import unstated_changes
from gateway.settings.load import CredentialFileError
from gateway.settings.sources import ConfigLoadError, LoadedConfig, load_config, watched_files

log = logging.getLogger("gateway.reload")

Stamp = tuple[tuple[str, float, int, int], ...]
# Runs in the worker thread: every component validates and builds its part (raising before
# anything changed); returns the commit that swaps them all in on the event loop, all or none.
Prepare = Callable[[LoadedConfig], Callable[[], None]]


def _stamp(files: list[Path]) -> Stamp:
    out = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime, st.st_size, st.st_ino))
        except OSError:
            out.append((str(f), -1.0, -1, -1))
    return tuple(out)


class Reloader:
    def __init__(
        self,
        *,
        paths: Sequence[str | Path],
        overrides: dict[str, Any],
        current: LoadedConfig,
        prepare: Prepare,
        on_result: Callable[[bool, str], None] | None = None,
        load: Callable[..., LoadedConfig] = load_config,
    ) -> None:
        self.paths = list(paths)
        self.overrides = overrides
        self.current = current
        self.prepare = prepare
        self.on_result = on_result
        self.load = load
        self._files = watched_files(self.paths, current.settings)
        self._stamp = _stamp(self._files)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="config-reload")

    def _load(self) -> tuple[LoadedConfig, Callable[[], None]]:
        """In the worker thread: everything but the swap."""
        running = self.current.settings
        loaded = self.load(self.paths, self.overrides, running.config_limits)
        refused = unstated_changes(running, loaded)
        if refused:
            raise ConfigLoadError(refused, reason="security_key_missing")
        try:
            return loaded, self.prepare(loaded)
        except (OSError, CredentialFileError) as exc:
            raise ConfigLoadError([str(exc)], reason="credentials") from exc
        except ValueError as exc:  # a component refused its part before anything changed
            raise ConfigLoadError([str(exc)], reason="invalid") from exc

    async def reload(self) -> bool:
        """Load off the loop and apply; True when the new configuration is serving."""
        reason = ""
        try:
            loop = asyncio.get_running_loop()
            loaded, commit = await loop.run_in_executor(self._worker, self._load)
            commit()
        except ConfigLoadError as exc:
            reason = exc.reason
            log.error("configuration reload refused (%s); keeping the last good one: %s",
                      reason, exc)  # fmt: skip
        except Exception:
            reason = "apply"
            log.exception("configuration reload failed; keeping the last good one")
        else:
            self.current = loaded
            log.info("configuration reloaded")
        self._files = watched_files(self.paths, self.current.settings)
        self._stamp = _stamp(self._files)
        if self.on_result:
            self.on_result(not reason, reason)
        return not reason

    def trigger(self) -> None:
        self._wake.set()

    def start(self, interval: float) -> None:
        loop = asyncio.get_running_loop()
        # Not possible outside the main thread (tests run servers in threads); polling remains.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, self.trigger)
        self._task = loop.create_task(self._run(interval))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._worker.shutdown(wait=False, cancel_futures=True)

    async def _run(self, interval: float) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval if interval else None)
                forced = True
            except TimeoutError:
                forced = False
            self._wake.clear()
            if forced or _stamp(self._files) != self._stamp:
                await self.reload()
