"""Production wiring: settings -> one ASGI app (the only place that knows every component).

Stack, outermost first: lifespan, canonical path, request ID and access log, health probes
(never queued), admission (APF or the max-in-flight filter; both authenticate and describe),
local endpoints (/metrics, debug dumps), reverse proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from gateway.accesslog.fields import formatter
from gateway.accesslog.middleware import RequestLog
from gateway.accesslog.writer import AccessLogWriter
from gateway.apfstack import build_controller, build_describer, build_flow_control
from gateway.asgi.canonical import BadPath, canonicalize
from gateway.asgi.credentials import read_bearer_token
from gateway.asgi.endpoints import LocalEndpoints
from gateway.asgi.errorformat import send_refused
from gateway.asgi.flowcontrol import Estimator, FlowControlMiddleware, unit_estimator
from gateway.asgi.health import HealthEndpoints, Lifecycle, Phase
from gateway.asgi.maxinflight import MaxInFlightMiddleware
from gateway.asgi.workestimate import GatewayEstimator
from gateway.clock import AsyncioEventClock, EventClock
from gateway.flowcontrol.controller import FlowController
from gateway.http.types import ASGIApp, Receive, Scope, Send
from gateway.http.websocket import http_send
from gateway.metrics.frontdoor import FrontDoorMetrics
from gateway.proxy.app import ProxyApp, UpstreamRoute
from gateway.proxy.headers import HeaderPolicy
from gateway.proxy.transport import PoolLimits, Timeouts, Transport, create_transport
from gateway.proxy.upstream_tls import UpstreamTLS
from gateway.proxy.websocket import WebSocketLimits, WebSocketUpstream
from gateway.reconfigure import Swap, apply_all, assign
from gateway.serving.h2_select import http2_mixin
from gateway.serving.limits import ClientLimits
from gateway.serving.protocol import protocol_class
from gateway.serving.tls import ServerTLS
from gateway.serving.websocket import websocket_protocol_class
from gateway.settings.model import GatewaySettings
from gateway.settings.reload import Reloader
from gateway.settings.sources import LoadedConfig

log = logging.getLogger("gateway.server")
RESTART_ONLY = ("listen", "upstreams", "proxy", "enable_priority_and_fairness",
                "http_implementation", "tls", "show_hidden_metrics_for_version")  # fmt: skip


class LoopClock:
    """The event clock on a known loop, with ``now`` bound straight to ``loop.time``: the core
    reads the time several times per request, and this saves a Python frame on each read
    (kept: >= 1% of APF-on instructions, docs/performance.md)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time
        self.call_at = loop.call_at
        self.call_later = loop.call_later


class Gateway:
    """The ASGI app ``apf-gateway serve`` runs; ``apply`` swaps in a reloaded configuration."""

    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        transport: Transport | None = None,
        estimator: Estimator | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        clock: EventClock | None = None,
        on_startup: list[Callable[[], None]] | None = None,
    ) -> None:
        settings = loaded.settings
        self.controller: FlowController | None = None
        self.work_estimator: GatewayEstimator | None = None
        self.flow_control: FlowControlMiddleware | None = None
        self.estimator: Estimator = estimator or unit_estimator
        # The loop the app will run on; APF's clock needs it before the first request.
        self.loop = loop
        self.clock: EventClock | None = clock
        if not settings.upstreams:
            raise ValueError("no upstream configured (--upstream URL or upstreams: in the config)")
        self.settings = settings
        # Read by each new client connection (gateway/serving); a reload swaps the settings.
        # The listener asks for client certificates when a bundle can verify them.
        self.client_limits = ClientLimits(
            settings.client, peer_certificates=settings.tls.enabled and _wants_certs(settings)
        )
        # The HTTPS listener's certificates (read here: a bad file fails the start).
        self.tls = (
            ServerTLS(settings.tls, client_certs=self.client_limits.peer_certificates)
            if settings.tls.enabled
            else None
        )
        # What the listener, the proxy's routes and transport and the admission kind were
        # built from: reloads change these only after a restart.
        self.running_since_start = settings
        self.lifecycle = Lifecycle()
        self.metrics = FrontDoorMetrics(u.url.rstrip("/") for u in settings.upstreams)
        self.metrics.client = self.client_limits
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.metrics)
        self.describer, self.authn_metrics = build_describer(settings, self.registry)
        p = settings.proxy
        upstream_tls = UpstreamTLS(settings)
        self.transport = transport or create_transport(
            p.transport,
            timeouts=Timeouts(
                connect=p.connect_timeout or None,
                read=p.read_timeout or None,
                pool=p.pool_timeout or None,
            ),
            limits=PoolLimits(
                max_connections=settings.server_concurrency_limit,
                keepalive_expiry=p.keepalive_expiry,
            ),
            tls=upstream_tls,
        )
        rh = settings.authentication.request_header
        self.proxy = ProxyApp(
            routes=[
                UpstreamRoute(
                    u.prefix,
                    u.url.rstrip("/"),
                    u.strip_prefix,
                    u.error_format,
                    read_bearer_token(u.bearer_token_file) if u.bearer_token_file else "",
                )
                for u in settings.upstreams
            ],
            transport=self.transport,
            headers=HeaderPolicy(
                identity_headers=(*rh.username_headers, *rh.group_headers),
                identity_prefixes=rh.extra_header_prefixes,
                forward_identity=p.forward_identity,
                impersonation=p.impersonation,
            ),
            observe=self.metrics.observe_upstream,
            max_connections=settings.server_concurrency_limit,
            websockets=WebSocketUpstream(
                WebSocketLimits(
                    max_message_bytes=p.websocket.max_message_bytes,
                    idle_timeout=p.websocket.idle_timeout,
                    ping_interval=p.websocket.ping_interval,
                    client_send_timeout=settings.client.send_timeout,
                    upstream_send_timeout=p.read_timeout or math.inf,
                    connect_timeout=p.connect_timeout or None,
                    handshake_timeout=p.read_timeout or None,
                ),
                tls=upstream_tls,
            ),
        )
        # Admission answers 401/429 in the route's shape; None keeps its rejections free of
        # any route look-up when no route asks for OpenWhisk's.
        self.error_format = self.proxy.error_format if self.proxy.has_openwhisk_routes else None
        self.endpoints = LocalEndpoints(
            self.proxy, registry=self.registry, debug_groups=settings.debug_allowed_groups,
            metrics_groups=settings.metrics_allowed_groups,
        )  # fmt: skip
        self.admission: ASGIApp = self._build_admission(loaded)
        # The relay's idle and stall timers run on APF's clock when there is one (a test's
        # fake clock drives both), else on the loop's.
        self.proxy.websockets.clock = self.clock or AsyncioEventClock(self.loop)
        self.health = HealthEndpoints(self.admission, lifecycle=self.lifecycle)
        a = settings.access_log
        self.access_log = AccessLogWriter.open(
            a.path, format=a.format, queue_size=a.queue_size, flush_timeout=a.flush_timeout
        )
        self.metrics.access_log = self.access_log
        self.request_log = RequestLog(
            self.health, submit=self.access_log.submit, header=settings.request_id_header,
            enabled=a.enabled,
        )  # fmt: skip
        self.on_startup = on_startup or []
        self.background: list[asyncio.Task[Any]] = []
        self.reloader: Reloader | None = None

    def _build_admission(self, loaded: LoadedConfig) -> ASGIApp:
        s = loaded.settings
        if not s.enable_priority_and_fairness:
            limiter = MaxInFlightMiddleware(
                self.endpoints,
                describer=self.describer,
                max_requests_inflight=s.max_requests_inflight,
                max_mutating_requests_inflight=s.max_mutating_requests_inflight,
                now=time.monotonic,
                status_body=s.too_many_requests_body == "status",
                on_reject=self.metrics.observe_maxinflight_reject,
                error_format=self.error_format,
                request_timeout=s.request_timeout,
                # requestTimeout's deadlines: a test's fake clock, else the loop's (LoopClock:
                # read once per request).
                clock=self.clock or (LoopClock(self.loop) if self.loop else AsyncioEventClock()),
            )
            self.metrics.maxinflight = limiter
            return limiter
        return self._build_flow_control(loaded)

    def _build_flow_control(self, loaded: LoadedConfig) -> ASGIApp:
        if self.clock is None:
            self.clock = LoopClock(self.loop) if self.loop is not None else AsyncioEventClock()
        self.controller = build_controller(self.endpoints, loaded, self.clock)
        middleware, self.work_estimator = build_flow_control(
            self.endpoints, loaded, controller=self.controller, now=self.clock.now,
            describer=self.describer, estimator=self.estimator, error_format=self.error_format,
        )  # fmt: skip
        self.estimator = middleware.estimator
        self.metrics.read_ahead = middleware.read_ahead
        self.flow_control = middleware
        return middleware

    def apply(self, loaded: LoadedConfig) -> None:
        """Apply a reloaded configuration; settings that need a restart are logged and kept."""
        self.prepare(loaded)()

    def prepare(self, loaded: LoadedConfig) -> Callable[[], None]:
        """Every component validates and builds its part of ``loaded`` here (off the event
        loop: credential files are read); the returned commit runs on the loop and swaps them
        all in, or, when one swap fails, none (``gateway.reconfigure``)."""
        new = loaded.settings
        swaps: list[Swap] = []
        # The admitted concurrency first: the pool is sized from it and must not lag behind.
        if isinstance(self.admission, MaxInFlightMiddleware):
            swaps.append(
                self.admission.prepare(
                    max_requests_inflight=new.max_requests_inflight,
                    max_mutating_requests_inflight=new.max_mutating_requests_inflight,
                    status_body=new.too_many_requests_body == "status",
                    request_timeout=new.request_timeout,
                )
            )
        if self.flow_control is not None:
            swaps.append(
                self.flow_control.prepare(
                    config=loaded.effective,
                    server_concurrency_limit=new.server_concurrency_limit,
                    borrowing_period=new.borrowing_adjustment_period,
                    request_timeout=new.request_timeout,
                    status_body=new.too_many_requests_body == "status",
                    max_queued_body_bytes=new.client.max_queued_body_bytes,
                )
            )
        if self.work_estimator is not None:
            swaps.append(self.work_estimator.prepare(new.work_estimation))
        if self.tls is not None:
            swaps.append(self.tls.prepare())  # the certificate files, read again
        swaps += [
            self.proxy.prepare(
                request_header=new.authentication.request_header,
                max_connections=new.server_concurrency_limit,
            ),
            self.describer.prepare(new.authentication, new.route_templates),
            self.endpoints.prepare(
                debug_groups=new.debug_allowed_groups, metrics_groups=new.metrics_allowed_groups
            ),
            self.request_log.prepare(header=new.request_id_header, enabled=new.access_log.enabled),
            assign(self.access_log, format=formatter(new.access_log.format)),
            # new client connections read these; open ones keep theirs
            assign(self.client_limits, settings=new.client),
            assign(self, settings=new),
        ]

        def commit() -> None:
            apply_all(swaps)
            for field in RESTART_ONLY:
                if getattr(new, field) != getattr(self.running_since_start, field):
                    log.warning("%s changed; it takes effect after a restart", field)
            before = self.running_since_start.access_log
            for field in ("path", "queue_size"):
                if getattr(new.access_log, field) != getattr(before, field):
                    log.warning("access_log.%s changed; it takes effect after a restart", field)
            if _wants_certs(new) and not self.client_limits.peer_certificates:
                log.warning("client CA files added; the listener asks for certificates after "
                            "a restart")  # fmt: skip
            h2c = self.running_since_start.client.http2.prior_knowledge
            if new.client.http2.prior_knowledge != h2c:  # it picks the listener's protocol class
                log.warning("client.http2.priorKnowledge changed; it takes effect after a restart")

        return commit

    def enable_reload(
        self, loaded: LoadedConfig, paths: Sequence[str | Path], overrides: dict[str, Any]
    ) -> Reloader:
        """Watch ``paths`` (and credential files) from startup on; SIGHUP forces a reload."""
        reloader = Reloader(
            paths=paths, overrides=overrides, current=loaded, prepare=self.prepare,
            on_result=self.metrics.observe_reload,
        )  # fmt: skip
        self.on_startup.append(lambda: reloader.start(self.settings.config_poll_interval))
        self.reloader = reloader
        return reloader

    def begin_drain(self) -> None:
        """SIGTERM: readiness turns false and queued requests are refused (429)."""
        self.lifecycle.phase = Phase.DRAINING
        if self.flow_control is not None:
            self.flow_control.drain()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind in ("http", "websocket"):
            # Everything below (probes, admission, the proxy) reads this one canonical path.
            try:
                scope = canonicalize(scope)
            except BadPath as exc:
                await self.request_log.serve(
                    _RefusePath(exc, self.error_format), scope, receive, send
                )
                return
            # the probes; everything else goes to admission, which awaits the authenticator's
            # prefetch (an issuer's keys, a webhook's answer) before describing the request
            await self.request_log.serve(self.health, scope, receive, send)
            return
        await self.health(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    for hook in self.on_startup:
                        hook()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                if self.flow_control is not None:
                    self.flow_control.start()  # borrowing needs the running loop's clock
                self.access_log.start()
                self._on_usr1(self.access_log.reopen)
                self.lifecycle.phase = Phase.READY
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.lifecycle.phase = Phase.STOPPED
                if self.flow_control is not None:
                    self.flow_control.stop()
                for task in self.background:
                    task.cancel()
                await self.describer.authenticator.aclose()  # the issuers' key refreshes
                if self.reloader is not None:
                    await self.reloader.stop()
                await self.transport.aclose()
                await self.proxy.websockets.aclose()
                # every request is over: write what is queued (bounded by flushTimeout)
                self._on_usr1(None)
                await asyncio.to_thread(self.access_log.close)
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    def _on_usr1(handler: Callable[[], None] | None) -> None:
        """SIGUSR1 reopens the access log (logrotate's ``postrotate``, as nginx). Only the main
        thread's loop can take signals: a server run in a test's thread goes without."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            if handler is None:
                loop.remove_signal_handler(signal.SIGUSR1)
            else:
                loop.add_signal_handler(signal.SIGUSR1, handler)


class _RefusePath:
    """The answer to a path that cannot be made canonical: 400 (for a websocket, the same
    answer through ``http_send``), inside the request log."""

    def __init__(self, exc: BadPath, error_format: Callable[[str], str] | None) -> None:
        self.exc = exc
        self.error_format = error_format

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_refused(scope, http_send(scope, send), self.exc, self.error_format)


def _wants_certs(settings: GatewaySettings) -> bool:
    auth = settings.authentication
    return bool(auth.client_ca_file or auth.request_header.client_ca_file)


def uvicorn_config(gateway: Gateway, *, log_level: str = "info", port: int | None = None) -> Any:
    """uvicorn settings for the gateway: the configured HTTP implementation guarded by the
    client timeouts and limits (``gateway.serving``), no access log, no header rewriting.

    ``proxy_headers`` stays off: uvicorn would otherwise replace the client address with
    ``X-Forwarded-For`` and let any client pass our front-proxy CIDR check.
    """

    s = gateway.settings
    host, listen_port = s.host_port
    tls = gateway.tls
    ws = s.proxy.websocket
    # h2c only when asked: without it the plain listener runs the HTTP/1.1 classes unchanged.
    # A TLS listener takes http2_mixin(...) always (ALPN "h2"; gateway/serving/h2_select.py).
    prior_knowledge = s.client.http2.prior_knowledge
    http2 = http2_mixin(prior_knowledge) if prior_knowledge or tls is not None else None
    return uvicorn.Config(
        gateway, host=host, port=listen_port if port is None else port, loop="none",
        http=protocol_class(s.http_implementation, gateway.client_limits, http2=http2),
        lifespan="on",
        timeout_keep_alive=math.ceil(s.client.keep_alive_timeout), access_log=False,
        server_header=False, date_header=False, proxy_headers=False, log_level=log_level,
        timeout_graceful_shutdown=math.ceil(gateway.settings.shutdown_grace_period),
        ssl_context_factory=None if tls is None else lambda _config, _default: tls.context,
        # uvicorn[standard]'s websockets-sansio implementation with the client send timeout
        # (gateway.serving.websocket), named rather than "auto" (which would pick wsproto
        # without websockets); it offers websocket.http.response, so refused handshakes get
        # real HTTP answers. Messages are relayed uncompressed.
        ws=websocket_protocol_class(gateway.client_limits), ws_max_size=ws.max_message_bytes,
        ws_per_message_deflate=False,
        ws_ping_interval=ws.ping_interval or None, ws_ping_timeout=ws.ping_interval or None,
    )  # fmt: skip
