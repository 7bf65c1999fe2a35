"""Wiring of one router process: store, activation writer, invoker, identity, action cache."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
from aiohttp import web

from gateway.clock import AsyncioEventClock
from gateway.platform.actions import ActionInfo
from gateway.platform.errors import NOT_FOUND, UNAUTHENTICATED, ApiError
from gateway.platform.internal_token import UNAUTHORIZED, bearer, matches
from gateway.router.activation import (
    ROUTER_LOST,
    THROTTLED,
    Outcome,
    Status,
    compose,
    error_outcome,
)
from gateway.router.bodies import MAX_ACTION_BYTES, MAX_PAYLOAD_BYTES, Parser
from gateway.router.execution import MAX_RESULT_BYTES
from gateway.router.identity import Identity
from gateway.router.invoker import Invoker, InvokerSettings, Throttled
from gateway.router.lru import Lru
from gateway.router.manager_client import ManagerClient
from gateway.router.metrics import CountingStore, RouterMetrics
from gateway.router.pool import PoolSettings, WarmContainer
from gateway.store import ActivationWriter, Store, StoreError, open_store
from gateway.store.outage import RETRY_AFTER, GuardedStore, StoreUnavailable

log = logging.getLogger("gateway.router")

PROXIED_HEADER = "X-Apf-Proxied-By"
STORE_UNAVAILABLE = "The platform's store is unreachable; try again later."
ACTIVATION_HEADER = "X-Apf-Activation-Id"
ACTION_CACHE_BYTES = 64 * 1024 * 1024  # documents' encoded size; holds a largest action
ACTION_CACHE_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class RouterSettings:
    router_id: str
    manager_url: str
    store_url: str
    buffer_seconds: float = 10.0
    pause_grace: float = 10.0
    idle_timeout: float = 600.0
    action_cache_seconds: float = 1.0
    # action documents kept (warm invokes, store outages) and actions with metric series
    action_cache_bytes: int = ACTION_CACHE_BYTES
    action_cache_entries: int = ACTION_CACHE_ENTRIES
    max_blocking_wait: float = 60.0
    store_timeout: float = 5.0  # a store call taking longer counts as an outage
    activation_buffer: int = 10_000  # records kept while the store is down; then oldest dropped
    max_payload_bytes: int = MAX_PAYLOAD_BYTES  # an invoke's body
    max_action_bytes: int = MAX_ACTION_BYTES  # an action PUT's body
    max_result_bytes: int = MAX_RESULT_BYTES  # an action's result (its /run answer)
    pool: PoolSettings = field(default_factory=PoolSettings)
    # pod template fields tenants may set (gateway.platform.podtemplate); empty: none of them
    allowed_pod_template_fields: frozenset[str] = frozenset()
    # required of the front door, the manager and peer routers; sent to them
    internal_token: str = field(default="", repr=False)


@dataclass(slots=True)
class _Cached:
    info: ActionInfo
    expires: float  # time.monotonic() after which the store is asked again


class Router:
    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings
        self._cache: Lru[tuple[str, str], _Cached] = Lru(
            settings.action_cache_entries, settings.action_cache_bytes
        )
        self.url = ""
        self.draining = False
        self.metrics = RouterMetrics(
            self._held, max_actions=settings.action_cache_entries, cache=self._cache
        )
        self.parser = Parser()  # large action bodies, off the event loop
        # this process: marks and the manager's lease tell it from a predecessor under the id
        self.incarnation = uuid.uuid4().hex[:16]

    async def start(self, url: str) -> None:
        self.url = url
        self.guarded = GuardedStore(
            open_store(self.settings.store_url), timeout=self.settings.store_timeout
        )
        self.store = cast("Store", self.guarded)
        await self.store.open()
        counted = CountingStore(self.store, self.metrics.write_failures)
        if self.settings.action_cache_bytes < self.settings.max_action_bytes:
            log.warning(
                "--action-cache-bytes %d is below --max-action-bytes %d: an action document "
                "larger than the cache is never kept, and is read from the store at every invoke",
                self.settings.action_cache_bytes,
                self.settings.max_action_bytes,
            )
        log.info(
            "router %s at %s: manager %s, store %s",
            self.settings.router_id,
            url,
            self.settings.manager_url,
            self.settings.store_url.split("@")[-1],  # no password in the log
        )
        self.writer = ActivationWriter(
            cast("Store", counted),
            owner=self.settings.router_id,
            incarnation=self.incarnation,
            max_pending=self.settings.activation_buffer,
            on_drop=self.metrics.activations_dropped.inc,
        )
        await self.writer.start()
        await self._recover()
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent",),
        )
        token = self.settings.internal_token
        self.manager_http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=30), headers=bearer(token) if token else None
        )
        settings = InvokerSettings(
            router_id=self.settings.router_id,
            buffer_seconds=self.settings.buffer_seconds,
            incarnation=self.incarnation,
            pool=PoolSettings(self.settings.pause_grace, self.settings.idle_timeout),
            max_result_bytes=self.settings.max_result_bytes,
        )
        manager = ManagerClient(self.settings.manager_url, self.manager_http)
        self.invoker = Invoker(settings, AsyncioEventClock(), manager, self.http)
        self.invoker.url = url
        self._lease = asyncio.ensure_future(self.invoker.lease_loop())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.invoker.registered.wait()

    async def _recover(self) -> None:
        """Activations a previous process of this router id left running when it died get
        their ``whisk internal error`` record now (``apf-gateway up`` restarts a router under
        the same id)."""

        try:
            records = await self.store.recover_in_flight(
                self.settings.router_id, int(time.time() * 1000)
            )
        except StoreError as exc:
            log.error("cannot record the activations a previous run left unfinished: %s", exc)
            return
        if records:
            log.warning(
                "recorded %d activations left unfinished by a previous run of router %s as "
                "whisk internal errors: %s",
                len(records),
                self.settings.router_id,
                " ".join(r["activationId"] for r in records),
            )

    def _held(self) -> list[WarmContainer]:
        invoker: Invoker | None = getattr(self, "invoker", None)
        return list(invoker.pool.by_id.values()) if invoker is not None else []

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: serving once registered with the manager, until shutdown begins.

        Registered *once* is enough: warm invocations never need the manager, so a manager
        that restarts or is unreachable later must not take every router out of service."""
        if self.draining:
            return False, "draining: shutting down"
        invoker: Invoker | None = getattr(self, "invoker", None)  # set by start()
        if invoker is None or not invoker.ever_registered:
            return False, "not registered with the container manager yet"
        return True, "ok"

    async def stop(self) -> None:
        self.draining = True
        if self.invoker.background:
            log.info("stopping: finishing %d background tasks", self.invoker.background)
        await self.invoker.wait_idle()  # activations still running keep the lease alive
        self._lease.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._lease
        await self.invoker.close()
        self.parser.close()
        records = "activation records written"
        try:
            await self.writer.close()
        except StoreError as exc:
            records = f"{self.writer.pending} activation records not written ({exc})"
            log.error("stopping with %s", records)
        await self.store.close()
        await self.http.close()
        await self.manager_http.close()
        log.info("stopped: %s, containers given back", records)

    # ---- requests ------------------------------------------------------------------------
    def identify(self, request: web.Request) -> Identity:
        """The caller the front door (or a peer) authenticated: ``X-Remote-*`` are read only
        on a request carrying the internal token, never because of where it comes from."""
        if self.authenticated(request):
            user = request.headers.get("X-Remote-User")
            namespace = request.headers.get("X-Remote-Extra-Namespace")
            if user and namespace:
                return Identity(user, namespace)
        raise ApiError(401, UNAUTHENTICATED)

    def authenticated(self, request: web.Request) -> bool:
        """The internal token (constant-time compare); a router without one believes nobody."""
        token = self.settings.internal_token
        return bool(token) and matches(request.headers.get("Authorization"), token)

    def is_trusted_peer(self, request: web.Request) -> bool:
        """The manager or a peer router: the internal token."""
        try:
            self.check_peer(request)
        except ApiError:
            return False
        return True

    def check_peer(self, request: web.Request) -> None:
        """401 without the internal token."""
        if not self.authenticated(request):
            raise ApiError(401, UNAUTHORIZED)

    def is_proxied(self, request: web.Request) -> bool:
        return PROXIED_HEADER in request.headers and self.is_trusted_peer(request)

    async def action(self, namespace: str, name: str) -> ActionInfo:
        """The action, re-read from the store once its cache entry is older than
        ``action_cache_seconds``; while the store is unreachable, the last one read (the
        store being down must not stop warm invocations), else 503. The cache holds at most
        ``action_cache_entries`` documents of ``action_cache_bytes`` (encoded) in all: the least
        recently invoked go first and are read from the store again when next invoked."""
        key = (namespace, name)
        cached = self._cache.get(key)
        now = time.monotonic()
        if cached is not None and cached.expires > now:
            return cached.info
        try:
            text = await self.store.get_action_json(namespace, name)
            doc = None if text is None else await self.parser.loads(text)
        except StoreUnavailable:
            if cached is None:
                raise ApiError(503, STORE_UNAVAILABLE, retry_after=RETRY_AFTER) from None
            cached.expires = now + self.settings.action_cache_seconds
            return cached.info
        if text is None or doc is None:
            self.gone(namespace, name)  # deleted through another router
            raise ApiError(404, NOT_FOUND)
        info = ActionInfo.from_doc(doc)
        entry = _Cached(info, now + self.settings.action_cache_seconds)
        for evicted in self._cache.put(key, entry, len(text)):
            self.metrics.action_cache_evictions.labels(evicted.limit).inc()
        return info

    def forget(self, namespace: str, name: str) -> None:
        """An update: the next invoke reads the new revision."""
        self._cache.pop((namespace, name))

    def gone(self, namespace: str, name: str) -> None:
        """The action was deleted: its document, its metric series and its containers here go
        (idle ones now, busy ones once their activations end)."""
        self._cache.pop((namespace, name))
        self.metrics.forget(namespace, name)
        invoker: Invoker | None = getattr(self, "invoker", None)  # set by start()
        if invoker is not None:
            invoker.retire(f"{namespace}/{name}", "deleted")

    async def execute(
        self,
        action: ActionInfo,
        params: dict[str, Any],
        identity: Identity,
        activation_id: str,
        t0: float,
        *,
        proxied: bool,
        blocking: bool,
    ) -> dict[str, Any]:
        """Admit, run, record. Blocking callers get ``ProxyTo``/``Throttled`` raised."""
        try:
            slot = await self.invoker.admit(action, proxied=proxied)
        except Throttled:
            if blocking:
                self.metrics.throttled(action)
                raise
            return self.record_throttled(action, identity, activation_id)
        outcome = await self.invoker.run(slot, action, params, activation_id, t0)
        self.metrics.observe(action, outcome)
        record = compose(activation_id, action, identity.subject, outcome)
        self.writer.submit(record)
        return record

    def failure_record(
        self, action: ActionInfo, identity: Identity, activation_id: str, message: str = ROUTER_LOST
    ) -> dict[str, Any]:
        """A ``whisk internal error`` record starting now: what an in-flight mark keeps, and
        what is written when an activation already answered with 202 cannot run."""
        outcome = error_outcome(Status.WHISK_ERROR, message)
        outcome.start_ms = outcome.end_ms = int(time.time() * 1000)
        return compose(activation_id, action, identity.subject, outcome)

    async def forward_detached(
        self,
        urls: list[str],
        request: web.Request,
        body: bytes,
        identity: Identity,
        action: ActionInfo,
        activation_id: str,
    ) -> None:
        """Hand an activation answered with 202 to the peer owning the containers; the peer
        marks it under its own id, so ours goes; if no peer answers, record the failure."""
        try:
            await self.forward(urls, request, body, identity, activation_id)
        except ApiError as exc:
            self.writer.submit(self.failure_record(action, identity, activation_id, exc.message))
        else:
            self.writer.unmark(activation_id)

    def record_throttled(
        self, action: ActionInfo, identity: Identity, activation_id: str
    ) -> dict[str, Any]:
        """Asynchronous throttling is an activation result, as in OpenWhisk, not a 429."""
        self.metrics.throttled(action)
        outcome: Outcome = error_outcome(Status.DEVELOPER_ERROR, THROTTLED)
        outcome.start_ms = outcome.end_ms = int(time.time() * 1000)
        record = compose(activation_id, action, identity.subject, outcome)
        self.writer.submit(record)
        return record

    async def forward(
        self,
        urls: list[str],
        request: web.Request,
        body: bytes,
        identity: Identity,
        activation_id: str,
        *,
        wait: float | None = None,
    ) -> web.Response:
        """One hop to a peer router that owns the action's containers; ``wait`` (seconds)
        replaces the request's blocking ``timeout``."""
        headers = {
            "X-Remote-User": identity.subject,
            "X-Remote-Extra-Namespace": identity.namespace,
            PROXIED_HEADER: self.settings.router_id,
            ACTIVATION_HEADER: activation_id,
            **(bearer(self.settings.internal_token) if self.settings.internal_token else {}),
            "Content-Type": request.headers.get("Content-Type", "application/json"),
        }
        target = request.rel_url
        if wait is not None:
            target = target.update_query(timeout=str(int(wait * 1000)))
        last: Exception | None = None
        for url in urls:
            try:
                async with self.http.post(url + str(target), data=body, headers=headers) as resp:
                    data = await resp.read()
                    keep = {
                        k: v
                        for k, v in resp.headers.items()
                        if k.lower() in ("x-openwhisk-activation-id", "retry-after")
                    }
                    keep[PROXIED_HEADER] = self.settings.router_id
                    return web.Response(
                        status=resp.status,
                        body=data,
                        headers=keep,
                        content_type="application/json",
                    )
            except aiohttp.ClientError as exc:
                last = exc
        raise ApiError(503, f"No router owning the action's containers answered: {last}")


ROUTER = web.AppKey("router", Router)
URL = web.AppKey("url", str)


async def lifecycle(app: web.Application) -> AsyncIterator[None]:
    router = app[ROUTER]
    await router.start(app[URL])
    yield
    await router.stop()
