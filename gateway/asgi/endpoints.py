"""Paths the gateway answers itself behind admission: ``/metrics`` and the APF debug dumps.

They sit inside flow control, as in kube-apiserver, so a scrape is classified like any other
non-resource request. The dumps are for users in the configured groups only (403 otherwise);
``/metrics`` too when ``metricsAllowedGroups`` is set, and open to every client when it is empty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from gateway.asgi.context import added_headers, request_context
from gateway.asgi.innerapp import adds_response_headers
from gateway.http.status import send_bytes, send_status
from gateway.http.types import ASGIApp, Receive, Scope, Send
from gateway.reconfigure import Swap, assign

DEBUG_PREFIX = "/debug/api_priority_and_fairness/"
TEXT = b"text/plain; charset=utf-8"
# name -> render(include_details) for /debug/api_priority_and_fairness/<name>
DebugDumps = dict[str, Callable[[bool], str]]


class LocalEndpoints:
    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: CollectorRegistry,
        dumps: DebugDumps | None = None,
        debug_groups: tuple[str, ...] = ("system:masters",),
        metrics_groups: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        # Its own responses carry the context's ``response_headers``; it declares that it adds
        # them when the app behind it does too (the proxy does; an in-process app does not,
        # and then admission adds them to every response through a wrapped ``send``).
        self.adds_response_headers = adds_response_headers(app)
        self.registry = registry
        self.dumps = dumps or {}
        self.debug_groups = frozenset(debug_groups)
        self.metrics_groups = frozenset(metrics_groups)

    def prepare(self, *, debug_groups: tuple[str, ...], metrics_groups: tuple[str, ...]) -> Swap:
        """A reload of who may read the dumps and ``/metrics`` (``gateway.reconfigure``)."""
        return assign(
            self, debug_groups=frozenset(debug_groups), metrics_groups=frozenset(metrics_groups)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path == "/metrics":
                groups = self.metrics_groups
                if groups and not await self._allowed(scope, send, groups):
                    return
                # Read the core's state on the loop (it is single-threaded), then format the
                # text in a worker thread: formatting is most of a scrape's cost and would
                # otherwise stall every request in flight.
                snapshot = _Snapshot(list(self.registry.collect()))
                body = await asyncio.to_thread(generate_latest, snapshot)
                await send_bytes(
                    send, 200, body, CONTENT_TYPE_LATEST.encode(),
                    added_headers(scope),
                )  # fmt: skip
                return
            if path.startswith(DEBUG_PREFIX):
                await self._debug(scope, send, path[len(DEBUG_PREFIX) :])
                return
        await self.app(scope, receive, send)

    async def _allowed(self, scope: Scope, send: Send, groups: frozenset[str]) -> bool:
        """True for a user in one of ``groups``; otherwise answers 403."""
        context = request_context(scope)
        digest = context.digest if context is not None else None
        user = digest.user if digest is not None else None
        if user is not None and not groups.isdisjoint(user.groups):
            return True
        who = user.name if user is not None else "unknown user"
        await send_status(
            send, 403, f'forbidden: User "{who}" cannot get path "{scope["path"]}"',
            headers=added_headers(scope),
        )  # fmt: skip
        return False

    async def _debug(self, scope: Scope, send: Send, name: str) -> None:
        if not await self._allowed(scope, send, self.debug_groups):
            return
        render = self.dumps.get(name)
        if render is None:
            await send_status(
                send, 404, f"no debug dump named {name!r}", headers=added_headers(scope)
            )
            return
        query = parse_qs(scope["query_string"].decode("latin-1"))
        details = bool(query.get("includeRequestDetails", [""])[0])
        await send_bytes(send, 200, render(details).encode(), TEXT, added_headers(scope))


class _Snapshot:
    """Metric families already collected, in the shape ``generate_latest`` reads."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)
