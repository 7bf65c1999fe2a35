"""Frozen settings values; field names are the YAML's camelCase in snake_case.

Defaults follow kube-apiserver where it has one (``maxRequestsInflight`` 400,
``maxMutatingRequestsInflight`` 200, request timeout 60 s, anonymous auth on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gateway.apfconfig.configset import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ERRORS,
    DEFAULT_MAX_OBJECTS,
    ConfigLimits,
)

API_VERSION = "gateway.apf.dev/v1alpha1"
KIND = "GatewayConfiguration"


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    url: str
    prefix: str = "/"
    strip_prefix: bool = False
    # The shape of the front door's own errors (401, 429, 502, 504) on this route: Kubernetes
    # ``Status``, or OpenWhisk's ``{"error", "code"}`` for an OpenWhisk API (``up`` sets it).
    error_format: Literal["kubernetes", "openwhisk"] = "kubernetes"


@dataclass(frozen=True, slots=True)
class RouteTemplateSettings:
    path: str
    resource: str = ""
    api_group: str = ""
    api_version: str = ""
    long_running: bool = False


@dataclass(frozen=True, slots=True)
class RequestHeaderSettings:
    allowed_cidrs: tuple[str, ...] = field(default=(), metadata={"yaml": "allowedCIDRs"})
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_header_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


@dataclass(frozen=True, slots=True)
class AuthenticationSettings:
    token_auth_file: str = ""
    openwhisk_keys_file: str = ""
    anonymous: bool = True
    request_header: RequestHeaderSettings = field(default_factory=RequestHeaderSettings)


@dataclass(frozen=True, slots=True)
class ProxySettings:
    transport: Literal["aiohttp", "httpx", "httpx-aiohttp", "h1"] = "h1"
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    pool_timeout: float = 5.0
    keepalive_expiry: float = 15.0
    forward_identity: bool = True
    # Client-sent Impersonate-* headers: refuse the request (403), drop them, or pass them on.
    impersonation: Literal["reject", "strip", "forward"] = "reject"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Limits on client connections to the front door (docs/frontdoor.md, "Client timeouts and
    connection limits"). Timeouts follow kube-apiserver's Go server where it sets one
    (ReadHeaderTimeout 32 s, IdleTimeout 90 s) and nginx's client_body_timeout and send_timeout
    (60 s)."""

    # From the first byte of a request head (or from accept) until the head is complete.
    header_timeout: float = 32.0
    # Longest silence between two reads of a request body the gateway is waiting for.
    body_timeout: float = 60.0
    # Longest time a response may wait for the client to read it (writing paused).
    send_timeout: float = 60.0
    # Idle time between requests on a kept-alive connection before it is closed.
    keep_alive_timeout: float = 90.0
    # Request line plus header fields; larger heads get 431 (zttp itself stops near 16 KiB).
    max_header_bytes: int = 65536
    # Open client connections; beyond it a new connection gets 503 and is closed.
    max_connections: int = 4096


@dataclass(frozen=True, slots=True)
class AccessLogSettings:
    """One line per request (docs/frontdoor.md, "Access log"), written by a background thread
    from a bounded queue: a full queue drops lines (counted), never delays a request."""

    enabled: bool = True
    # "json": one JSON object per line; "combined": nginx's combined format.
    format: Literal["json", "combined"] = "json"
    # "-": standard output; otherwise a file, opened for appending. Needs a restart.
    path: str = "-"
    # Lines waiting for the writer; beyond it lines are dropped. Needs a restart.
    queue_size: int = 10000
    # At shutdown, how long the writer may take to write what is queued.
    flush_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class WorkEstimateRuleSettings:
    """One rule: requests that match get these seats (or, with ``adaptive``, learned ones)."""

    name: str = ""
    methods: tuple[str, ...] = ()
    path: str = ""
    headers: tuple[str, ...] = ()  # "Name=value", matched exactly
    query: tuple[str, ...] = ()  # "key=value", matched exactly
    initial_seats: int = 1
    final_seats: int = 0
    additional_latency: float = 0.0
    adaptive: bool = False


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    seat_time: float = 0.1
    maximum_seats: int = 10
    smoothing: float = 0.2


@dataclass(frozen=True, slots=True)
class WorkEstimationSettings:
    # Kubernetes' list/watch/mutating estimators for Kubernetes-shaped paths.
    kubernetes: bool = True
    maximum_list_seats: int = 100
    maximum_mutating_seats: int = 10
    # How often one collection's size is re-learned from a list response (kube-apiserver
    # refreshes its object counts from storage once a minute).
    list_learning_interval: float = 1.0
    rules: tuple[WorkEstimateRuleSettings, ...] = ()
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    listen: str = "127.0.0.1:8080"
    upstreams: tuple[UpstreamSettings, ...] = ()
    route_templates: tuple[RouteTemplateSettings, ...] = ()
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    enable_priority_and_fairness: bool = True
    request_timeout: float = 60.0
    # "text": kube-apiserver's plain body; "status": a Status JSON naming level and reason.
    too_many_requests_body: Literal["text", "status"] = "text"
    debug_allowed_groups: tuple[str, ...] = ("system:masters",)
    # Empty: /metrics is open to every client, anonymous ones included (what scrapers expect).
    metrics_allowed_groups: tuple[str, ...] = ()
    shutdown_grace_period: float = 30.0
    config_poll_interval: float = 2.0
    authentication: AuthenticationSettings = field(default_factory=AuthenticationSettings)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    # How often seats move between priority levels (kube-apiserver: 10 s).
    borrowing_adjustment_period: float = 10.0
    work_estimation: WorkEstimationSettings = field(default_factory=WorkEstimationSettings)
    # uvicorn's HTTP/1.1 implementation. zttp checks and writes response headers in native
    # code; httptools is the fallback (docs/decisions/0007-zttp-http-implementation.md).
    http_implementation: Literal["zttp", "httptools"] = "zttp"
    # "ensured": Kubernetes' mandatory and suggested objects are added to the files' objects as
    # the API server's ensurer adds them; "exact": the files' objects plus the mandatory ones.
    flow_control_objects: Literal["ensured", "exact"] = "ensured"
    # Bounds on reading --config paths; the values in force when a read starts apply to it.
    max_config_bytes: int = DEFAULT_MAX_BYTES
    max_config_objects: int = DEFAULT_MAX_OBJECTS
    max_config_errors: int = DEFAULT_MAX_ERRORS
    client: ClientSettings = field(default_factory=ClientSettings)
    access_log: AccessLogSettings = field(default_factory=AccessLogSettings)
    # The request ID header: a client's safe value is kept, else one is generated; it goes
    # upstream, back on every response and into the access log.
    request_id_header: str = field(default="X-Request-Id", metadata={"yaml": "requestIDHeader"})

    @property
    def server_concurrency_limit(self) -> int:
        """APF's server-wide seat count: the sum of the two max-in-flight limits."""
        return self.max_requests_inflight + self.max_mutating_requests_inflight

    @property
    def config_limits(self) -> ConfigLimits:
        return ConfigLimits(self.max_config_bytes, self.max_config_objects, self.max_config_errors)

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)
