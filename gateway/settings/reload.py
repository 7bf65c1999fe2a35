"""Hot reload: poll the watched files and listen for SIGHUP; apply only whole, valid configs.

Polling (mtime, size, inode) works on every filesystem, including Kubernetes ConfigMap volumes
whose files change by symlink swap. A failed load is logged with all its errors and the last
good configuration keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.settings.sources import ConfigLoadError, LoadedConfig, load_config, watched_files

log = logging.getLogger("gateway.reload")

Stamp = tuple[tuple[str, float, int, int], ...]


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
        apply: Callable[[LoadedConfig], None],
        on_result: Callable[[bool], None] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.overrides = overrides
        self.current = current
        self.apply = apply
        self.on_result = on_result
        self._files = watched_files(self.paths, current.settings)
        self._stamp = _stamp(self._files)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def reload(self) -> bool:
        """Load and apply now; True when the new configuration is serving."""
        try:
            loaded = load_config(self.paths, self.overrides)
            self.apply(loaded)
        except ConfigLoadError as exc:
            log.error("configuration reload refused; keeping the last good one: %s", exc)
            ok = False
        except Exception:
            log.exception("configuration reload failed; keeping the last good one")
            ok = False
        else:
            self.current = loaded
            ok = True
            log.info("configuration reloaded")
        self._files = watched_files(self.paths, self.current.settings)
        self._stamp = _stamp(self._files)
        if self.on_result:
            self.on_result(ok)
        return ok

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

    async def _run(self, interval: float) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval if interval else None)
                forced = True
            except TimeoutError:
                forced = False
            self._wake.clear()
            if forced or _stamp(self._files) != self._stamp:
                self.reload()
