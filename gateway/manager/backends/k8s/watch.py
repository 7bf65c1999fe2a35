"""The manager's view of its Pods: list once, then watch from that resourceVersion.

A watch that the server ends is resumed from the last version seen (lightkube does that); a
``410 Gone`` (the version was compacted away) makes us list again and replace the whole view,
so deletions that happened while we were not watching are not missed. Waiters block on a
condition that every event notifies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.manager.backends.k8s.api import KubeApi, KubeError

log = logging.getLogger("gateway.manager.kubernetes")

FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)

Pod = dict[str, Any]


def is_terminating(pod: Pod) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_ready(pod: Pod) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or not status.get("podIP") or is_terminating(pod):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def failure(pod: Pod) -> str | None:
    """Why the pod can never become (or stay) a usable container, or None."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return f"pod {status.get('phase')}: {status.get('reason') or status.get('message') or ''}"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip()
        if state.get("terminated"):
            term = state["terminated"]
            return f"container terminated ({term.get('reason')}, exit {term.get('exitCode')})"
    return None


class PodWatch:
    def __init__(self, api: KubeApi, labels: dict[str, str], watch_timeout: int = 300) -> None:
        self.api = api
        self.labels = labels
        self.watch_timeout = watch_timeout
        self.pods: dict[str, Pod] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        self._changed = asyncio.Condition()

    async def run(self) -> None:
        delay = 0.05
        while True:
            try:
                version = await self._relist()
                async for kind, pod in self.api.watch_pods(
                    self.labels, version, self.watch_timeout
                ):
                    await self._apply(kind, pod)
                    delay = 0.05
            except KubeError as exc:
                if exc.status == 410:
                    log.info("pod watch expired (410 Gone); listing again")
                    continue
                log.warning("pod watch failed (%s); retrying in %.1f s", exc, delay)
            except Exception:  # a bug or a malformed event must not end the watch for good
                log.exception("pod watch broke; retrying in %.1f s", delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _relist(self) -> str:
        items, version = await self.api.list_pods(self.labels)
        async with self._changed:
            self.pods = {p["metadata"]["name"]: p for p in items}
            self.relists += 1
            self._changed.notify_all()
        self.synced.set()
        return version

    async def _apply(self, kind: str, pod: Pod) -> None:
        name = pod["metadata"]["name"]
        async with self._changed:
            if kind == "DELETED":
                self.pods.pop(name, None)
            elif kind in ("ADDED", "MODIFIED"):
                self.pods[name] = pod
            self._changed.notify_all()

    async def wait_for(
        self, name: str, predicate: Callable[[Pod | None], bool], seconds: float
    ) -> Pod | None:
        """The pod (None if absent) once ``predicate`` holds; TimeoutError after ``seconds``."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: predicate(self.pods.get(name))), seconds
            )
            return self.pods.get(name)
