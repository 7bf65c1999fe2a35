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
class UpstreamTLSSettings:
    """How an ``https://`` upstream is verified and what the gateway presents to it."""

    # PEM bundle the upstream's certificate must chain to; empty: proxy.upstreamCAFile, else
    # the system's CAs.
    ca_file: str = field(default="", metadata={"yaml": "caFile"})
    # The name checked against the upstream's certificate (and sent as SNI); empty: the URL's.
    server_name: str = ""
    # A client certificate for the upstream (kube-apiserver's --proxy-client-cert-file).
    cert_file: str = ""
    key_file: str = ""
    # No verification at all; only when written out.
    insecure_skip_verify: bool = False


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    url: str
    prefix: str = "/"
    strip_prefix: bool = False
    # The shape of the front door's own errors (401, 429, 502, 504) on this route: Kubernetes
    # ``Status``, or OpenWhisk's ``{"error", "code"}`` for an OpenWhisk API (``up`` sets it).
    error_format: Literal["kubernetes", "openwhisk"] = "kubernetes"
    # A file holding a token the front door authenticates itself with on this route
    # (``Authorization: Bearer``, replacing the client's): the platform's routers believe
    # identity headers only on requests carrying their internal token. Read at start.
    bearer_token_file: str = ""
    tls: UpstreamTLSSettings = field(default_factory=UpstreamTLSSettings)


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
    # kube's --requestheader-client-ca-file: identity headers are believed from a connection
    # whose client certificate verifies against this bundle (and whose CN is in allowedNames,
    # when that is set).
    client_ca_file: str = field(default="", metadata={"yaml": "clientCAFile"})
    allowed_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WebhookTokenSettings:
    """kube-apiserver's ``--authentication-token-webhook-*``; timeout and concurrency are ours."""

    config_file: str = ""  # a kubeconfig naming the TokenReview webhook
    cache_ttl: float = field(default=120.0, metadata={"yaml": "cacheTTL"})
    timeout: float = 10.0
    max_concurrency: int = 32


@dataclass(frozen=True, slots=True)
class AuthenticationSettings:
    # kube's --client-ca-file: a client certificate verified against it authenticates as
    # user = CN, groups = O.
    client_ca_file: str = field(default="", metadata={"yaml": "clientCAFile"})
    token_auth_file: str = ""
    # kube-apiserver's --authentication-config: an AuthenticationConfiguration (jwt extra).
    authentication_config: str = ""
    openwhisk_keys_file: str = ""
    anonymous: bool = True
    request_header: RequestHeaderSettings = field(default_factory=RequestHeaderSettings)
    webhook: WebhookTokenSettings = field(default_factory=WebhookTokenSettings)


@dataclass(frozen=True, slots=True)
class WebSocketSettings:
    """WebSocket pass-through (docs/frontdoor.md, "WebSockets")."""

    # Largest message either side may send; a larger one closes the websocket with 1009
    # (python-websockets' default, 1 MiB).
    max_message_bytes: int = 1048576
    # No message either way for this long closes both sides with 1001 (the kubelet's
    # --streaming-connection-idle-timeout, which bounds kubectl exec/attach/port-forward: 4h).
    idle_timeout: float = 14400.0
    # Each side is pinged this often and closed if it does not answer within as long
    # (uvicorn's default, 20 s); 0: no pings.
    ping_interval: float = 20.0


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
    # CAs for https:// upstreams without their own tls.caFile; empty: the system's CAs.
    upstream_ca_file: str = field(default="", metadata={"yaml": "upstreamCAFile"})
    websocket: WebSocketSettings = field(default_factory=WebSocketSettings)


@dataclass(frozen=True, slots=True)
class Http2Settings:
    """HTTP/2 from clients (docs/frontdoor.md, "HTTP/2"): kube-apiserver's stream limit, the
    rest bounds the known HTTP/2 denial-of-service attacks the way Go's server and Envoy do."""

    # h2c with prior knowledge on a plain listener (the TLS listener negotiates h2 by ALPN).
    prior_knowledge: bool = False
    # SETTINGS_MAX_CONCURRENT_STREAMS (kube-apiserver's --http2-max-streams-per-connection).
    max_streams_per_connection: int = 100
    # SETTINGS_HEADER_TABLE_SIZE: the HPACK decoder table a client may fill.
    header_table_size: int = 4096
    # SETTINGS_INITIAL_WINDOW_SIZE: request body bytes buffered per stream before the app reads.
    initial_window_size: int = 65535
    # Streams the client may reset within resetWindow before GOAWAY ENHANCE_YOUR_CALM
    # (CVE-2023-44487, rapid reset).
    max_reset_streams: int = 200
    reset_window: float = 10.0
    # PING/SETTINGS answers queued while the client does not read (Envoy's
    # max_outbound_control_frames); past it the connection is closed.
    max_control_frames: int = 1000


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
    # Request body all requests waiting in APF queues may read ahead together (each at most
    # 1 MiB); over it a waiting request stops reading ahead (the rest stays in its socket).
    max_queued_body_bytes: int = 32 * 1024 * 1024
    http2: Http2Settings = field(default_factory=Http2Settings)


@dataclass(frozen=True, slots=True)
class SNICertKeySettings:
    """One of kube's --tls-sni-cert-key pairs; without names, the certificate's SANs and CN."""

    cert_file: str
    key_file: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TLSSettings:
    """The HTTPS listener (kube-apiserver's --tls-* flags); no certFile: plain HTTP. The files
    are reloaded when they change."""

    cert_file: str = ""
    private_key_file: str = ""
    min_version: Literal["VersionTLS12", "VersionTLS13"] = "VersionTLS12"
    sni_cert_keys: tuple[SNICertKeySettings, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


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
    # Larger list responses are passed on without learning from them (the body is kept
    # until it ends, then its items are counted in a worker thread).
    list_learning_max_bytes: int = 8 * 1024 * 1024
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
    # kube-apiserver's --show-hidden-metrics-for-version: the previous minor version of the
    # Kubernetes release whose metrics the gateway follows (METRICS_KUBERNETES_VERSION) shows
    # the deprecated metrics that release hides. Read at start.
    show_hidden_metrics_for_version: Literal["", "1.33"] = ""
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
    tls: TLSSettings = field(default_factory=TLSSettings)
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
