"""Work estimation in the front door: seats per request from the core's estimators, and the
ASGI layer that teaches them what only the proxy sees.

kube-apiserver knows its collection sizes and its watches; a gateway learns them: the size of
the lists it proxies (items, plus ``remainingItemCount`` for a paged first page; one response
per collection and ``listLearningInterval``, as kube-apiserver refreshes its counts
periodically rather than on every request), the watches it is proxying right now, and, for
adaptive rules, how long each route takes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final
from urllib.parse import parse_qsl

from gateway.asgi.context import CONTEXT_KEY, RequestContext
from gateway.asgi.innerapp import adds_response_headers
from gateway.asgi.listcount import SHAPE_BYTES, count_items, looks_like_list
from gateway.flowcontrol.controller import Classification
from gateway.flowcontrol.digest import RequestDigest, RequestInfo, WorkEstimate
from gateway.flowcontrol.workestimate import (
    AdaptiveEstimator,
    EstimatorConfig,
    RequestView,
    RuleMatch,
    WorkEstimator,
    WorkRule,
)
from gateway.http.types import ASGIApp, Message, Receive, Scope, Send
from gateway.reconfigure import Swap, Undo, assign
from gateway.settings.model import WorkEstimationSettings

log = logging.getLogger(__name__)

ROUTE_KEY: Final = "gateway.work_route"


def _pairs(items: tuple[str, ...], *, lower: bool) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        name, _, value = item.partition("=")
        out.append((name.strip().lower() if lower else name.strip(), value.strip()))
    return tuple(out)


def build_estimator(settings: WorkEstimationSettings, now: Callable[[], float]) -> WorkEstimator:
    rules = [
        WorkRule(
            r.name,
            RuleMatch(
                methods=tuple(m.upper() for m in r.methods),
                path=r.path,
                headers=_pairs(r.headers, lower=True),
                query=_pairs(r.query, lower=False),
            ),
            WorkEstimate(r.initial_seats, r.final_seats, r.additional_latency),
            adaptive=r.adaptive,
        )
        for r in settings.rules
    ]
    a = settings.adaptive
    adaptive = (
        AdaptiveEstimator(seat_time=a.seat_time, maximum=a.maximum_seats, smoothing=a.smoothing)
        if any(r.adaptive for r in settings.rules)
        else None
    )
    config = EstimatorConfig(
        maximum_list_seats=settings.maximum_list_seats,
        maximum_mutating_seats=settings.maximum_mutating_seats,
    )
    return WorkEstimator(
        now=now, config=config, rules=rules, adaptive=adaptive, kubernetes=settings.kubernetes
    )


def request_view(scope: Scope) -> RequestView:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    query: dict[str, str] = {}
    raw = scope.get("query_string", b"")
    if raw:
        query = dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))
    return RequestView(scope.get("method", "GET"), scope["path"], headers, query)


class GatewayEstimator:
    """The middleware's ``estimator``; ``reconfigure`` swaps rules on reload, keeping what was
    learned (collection sizes, open watches, route times)."""

    def __init__(self, settings: WorkEstimationSettings, now: Callable[[], float]) -> None:
        self.now = now
        self.estimator = build_estimator(settings, now)
        self.list_learning_interval = settings.list_learning_interval
        self.list_learning_max_bytes = settings.list_learning_max_bytes
        # (group, resource, namespace) -> when a list response was last taken to learn from.
        self._learning: dict[tuple[str, str, str], float] = {}

    def prepare(self, settings: WorkEstimationSettings) -> Swap:
        """A reload (``gateway.reconfigure``): the new rules are built here; the swap moves
        what was learned onto them and puts them in place."""
        fresh = build_estimator(settings, self.now)

        def swap() -> Undo:
            old = self.estimator
            fresh.counts = old.counts
            fresh.watches = old.watches
            if fresh.adaptive is not None and old.adaptive is not None:
                fresh.adaptive = old.adaptive
            return assign(
                self, estimator=fresh, list_learning_interval=settings.list_learning_interval,
                list_learning_max_bytes=settings.list_learning_max_bytes,
            )()  # fmt: skip

        return swap

    def reconfigure(self, settings: WorkEstimationSettings) -> None:
        self.prepare(settings)()

    def __call__(
        self, digest: RequestDigest, classification: Classification, scope: Scope
    ) -> WorkEstimate:
        estimator = self.estimator
        view = request_view(scope) if estimator.rules else None
        estimate = estimator.estimate(digest, classification.level.max_seats, view)
        if estimate.watch_count is not None:
            classification.flow_stats.watch_count_samples.observe(estimate.watch_count)
        if estimate.route is not None:
            scope[ROUTE_KEY] = estimate.route
        return estimate.work

    def should_learn(self, info: RequestInfo) -> bool:
        """One list response per collection and interval is read for its size; the others
        pass straight through (reading every response costs more than admission itself)."""
        now = self.now()
        key = (info.api_group, info.resource, info.namespace)
        last = self._learning.get(key)
        if last is not None and now - last < self.list_learning_interval:
            return False
        if len(self._learning) >= 4096:
            self._learning.clear()
        self._learning[key] = now
        return True


class LearningApp:
    """Sits between flow control and the proxy; passes everything through unchanged.

    ``select`` picks, per request, the inner app itself or one of the learning wrappers, so a
    caller that uses it (flow control does) adds no layer to requests there is nothing to
    learn from - most of them.
    """

    def __init__(self, app: ASGIApp, estimator: GatewayEstimator) -> None:
        self.app = app
        self.estimator = estimator
        self.adds_response_headers = adds_response_headers(app)
        self._recording = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.select(scope)(scope, receive, send)

    def select(self, scope: Scope) -> ASGIApp:
        context = scope.get(CONTEXT_KEY)
        if not isinstance(context, RequestContext):
            return self.app
        digest = context.digest
        if scope.get(ROUTE_KEY) is not None:
            return self._timed
        info = digest.info
        verb = info.verb
        if (
            verb not in ("list", "watch")
            or not info.is_resource_request
            or not self.estimator.estimator.kubernetes
        ):
            return self.app
        if verb == "watch":
            return self._watched
        if (
            self._recording  # one response at a time is kept to learn from
            or info.query_value("continue")
            or not self.estimator.should_learn(info)
        ):
            # A later page says nothing about the total; a recent response already told it.
            return self.app
        return self._listed

    async def _timed(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            adaptive = self.estimator.estimator.adaptive
            if adaptive is not None:
                adaptive.observe(scope[ROUTE_KEY], time.monotonic() - started)

    async def _watched(self, scope: Scope, receive: Receive, send: Send) -> None:
        info = _digest(scope).info
        watches = self.estimator.estimator.watches
        counted = watches.register(info)
        try:
            await self.app(scope, receive, send)
        finally:
            if counted:
                watches.forget(info)

    async def _listed(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._recording:
            await self.app(scope, receive, send)
            return
        self._recording = True
        try:
            await self.app(scope, receive, self._list_recorder(_digest(scope), send))
        finally:
            self._recording = False

    def _list_recorder(self, digest: RequestDigest, send: Send) -> Send:
        """Passes the response on, keeping its body only while it can be a Kubernetes List:
        ``application/json``, 200, its first bytes a List's, at most ``listLearningMaxBytes``;
        the items are counted in a worker thread before the last piece goes out."""
        chunks: list[bytes] = []
        cap = self.estimator.list_learning_max_bytes
        state = {"ok": False, "size": 0, "shaped": False}

        async def recording_send(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                headers = dict(message.get("headers", ()))
                state["ok"] = message["status"] == 200 and _is_json(headers.get(b"content-type"))
            elif kind == "http.response.body" and state["ok"]:
                body = message.get("body", b"")
                size = state["size"] = state["size"] + len(body)
                last = not message.get("more_body", False)
                if size > cap:
                    state["ok"] = False
                    chunks.clear()
                else:
                    chunks.append(body)
                    if not state["shaped"] and (size >= SHAPE_BYTES or last):
                        state["shaped"] = True
                        state["ok"] = looks_like_list(b"".join(chunks)[:SHAPE_BYTES])
                    if state["ok"] and last:
                        whole = b"".join(chunks)
                        chunks.clear()
                        await self._learn(digest, whole)
            await send(message)

        return recording_send

    async def _learn(self, digest: RequestDigest, body: bytes) -> None:
        counted = await asyncio.get_running_loop().run_in_executor(None, count_items, body)
        if counted is None:
            return
        items, remaining = counted
        count = items + remaining
        self.estimator.estimator.observe_list(digest, count, len(body) * count // max(items, 1))


def _is_json(content_type: bytes | None) -> bool:
    """A Kubernetes List in JSON is ``application/json`` (parameters such as a charset aside)."""
    if content_type is None:
        return False
    return content_type.split(b";", 1)[0].strip().lower() == b"application/json"


def _digest(scope: Scope) -> RequestDigest:
    """The digest of a request ``select`` sent here (it had a context)."""
    context = scope[CONTEXT_KEY]
    assert isinstance(context, RequestContext)
    return context.digest
