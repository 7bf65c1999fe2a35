"""``apf-gateway serve``: run the front door. Every GatewayConfiguration field has a flag; flags
override the file and survive reloads (they are merged into every reloaded document)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import socket
import sys
from types import FrameType
from typing import Any

# flag dest -> document path (camelCase keys), kind
FLAGS: list[tuple[str, str, str, str]] = [
    # (flag, document path, metavar, help)
    ("--listen", "listen", "HOST:PORT", "address to serve on (default 127.0.0.1:8080)"),
    (
        "--max-requests-inflight",
        "maxRequestsInflight",
        "N",
        "read-only in-flight limit; with APF, part of the server concurrency limit (default 400)",
    ),
    (
        "--max-mutating-requests-inflight",
        "maxMutatingRequestsInflight",
        "N",
        "mutating in-flight limit; with APF, part of the server concurrency limit (default 200)",
    ),
    (
        "--enable-priority-and-fairness",
        "enablePriorityAndFairness",
        "BOOL",
        "API Priority and Fairness (default true); false selects the max-in-flight filter",
    ),
    (
        "--request-timeout",
        "requestTimeout",
        "DURATION",
        "request deadline; queue waits are limited to a quarter of it, at most 60s (default 60s)",
    ),
    (
        "--too-many-requests-body",
        "tooManyRequestsBody",
        "text|status",
        "429 body: kube-apiserver's plain text (default) or a Status naming level and reason",
    ),
    (
        "--debug-allowed-groups",
        "debugAllowedGroups",
        "G1,G2",
        "groups allowed to read /debug/api_priority_and_fairness/* (default system:masters)",
    ),
    (
        "--metrics-allowed-groups",
        "metricsAllowedGroups",
        "G1,G2",
        "groups allowed to read /metrics (default: none given, open to every client)",
    ),
    (
        "--shutdown-grace-period",
        "shutdownGracePeriod",
        "DURATION",
        "on SIGTERM, how long executing requests may take to finish (default 30s)",
    ),
    (
        "--config-poll-interval",
        "configPollInterval",
        "DURATION",
        "how often config files are checked for changes; 0 = SIGHUP only (default 2s)",
    ),
    (
        "--tls-cert-file",
        "tls.certFile",
        "FILE",
        "serve HTTPS with this PEM certificate (chain); reloaded when it changes",
    ),
    (
        "--tls-private-key-file",
        "tls.privateKeyFile",
        "FILE",
        "the PEM private key of --tls-cert-file",
    ),
    (
        "--tls-min-version",
        "tls.minVersion",
        "VERSION",
        "lowest TLS version: VersionTLS12 (default) or VersionTLS13",
    ),
    (
        "--client-ca-file",
        "authentication.clientCAFile",
        "FILE",
        "client certificates that verify against these CAs authenticate as CN, groups O",
    ),
    (
        "--requestheader-client-ca-file",
        "authentication.requestHeader.clientCAFile",
        "FILE",
        "identity headers are believed from clients whose certificate verifies against these CAs",
    ),
    (
        "--requestheader-allowed-names",
        "authentication.requestHeader.allowedNames",
        "N1,N2",
        "front-proxy certificate CNs allowed (default: any verified by the CA file)",
    ),
    (
        "--token-auth-file",
        "authentication.tokenAuthFile",
        "FILE",
        'static bearer tokens, CSV token,user,uid,"group1,group2"',
    ),
    (
        "--authentication-config",
        "authentication.authenticationConfig",
        "FILE",
        "kube's AuthenticationConfiguration (jwt authenticators; needs the jwt extra)",
    ),
    (
        "--authentication-token-webhook-config-file",
        "authentication.webhook.configFile",
        "FILE",
        "kubeconfig of a TokenReview webhook that authenticates bearer tokens",
    ),
    (
        "--authentication-token-webhook-cache-ttl",
        "authentication.webhook.cacheTTL",
        "DURATION",
        "how long the webhook's answers (yes and no) are cached (default 2m)",
    ),
    (
        "--openwhisk-keys-file",
        "authentication.openwhiskKeysFile",
        "FILE",
        "OpenWhisk API keys for HTTP Basic, one uuid:key,subject,namespace per line",
    ),
    (
        "--anonymous-auth",
        "authentication.anonymous",
        "BOOL",
        "treat requests without credentials as system:anonymous (default true); false -> 401",
    ),
    (
        "--requestheader-allowed-cidrs",
        "authentication.requestHeader.allowedCIDRs",
        "CIDRS",
        "source networks trusted to send identity headers (default none)",
    ),
    (
        "--requestheader-username-headers",
        "authentication.requestHeader.usernameHeaders",
        "H1,H2",
        "user name headers from trusted proxies (default X-Remote-User)",
    ),
    (
        "--requestheader-group-headers",
        "authentication.requestHeader.groupHeaders",
        "H1,H2",
        "group headers from trusted proxies (default X-Remote-Group)",
    ),
    (
        "--requestheader-extra-headers-prefix",
        "authentication.requestHeader.extraHeaderPrefixes",
        "P1,P2",
        "extra-attribute header prefixes (default X-Remote-Extra-)",
    ),
    (
        "--http-implementation",
        "httpImplementation",
        "NAME",
        "uvicorn's HTTP/1.1 implementation: zttp (default) or httptools; needs a restart",
    ),
    (
        "--client-header-timeout",
        "client.headerTimeout",
        "DURATION",
        "a request head must arrive within this, else 408 and close (default 32s)",
    ),
    (
        "--client-body-timeout",
        "client.bodyTimeout",
        "DURATION",
        "longest silence inside a request body, else 408 and close (default 60s)",
    ),
    (
        "--client-send-timeout",
        "client.sendTimeout",
        "DURATION",
        "longest wait for the client to read a response, else close (default 60s)",
    ),
    (
        "--keep-alive-timeout",
        "client.keepAliveTimeout",
        "DURATION",
        "idle client connections are closed after this (default 90s)",
    ),
    (
        "--max-header-bytes",
        "client.maxHeaderBytes",
        "N",
        "largest request line plus headers; larger gets 431 (default 65536)",
    ),
    (
        "--max-connections",
        "client.maxConnections",
        "N",
        "open client connections; a new one over it gets 503 and is closed (default 4096)",
    ),
    (
        "--max-queued-body-bytes",
        "client.maxQueuedBodyBytes",
        "N",
        "request body all queued requests may read ahead together (default 33554432)",
    ),
    (
        "--http2-prior-knowledge",
        "client.http2.priorKnowledge",
        "BOOL",
        "serve h2c (HTTP/2 without TLS) to clients that start with the HTTP/2 preface "
        "(default false); needs a restart",
    ),
    (
        "--http2-max-streams-per-connection",
        "client.http2.maxStreamsPerConnection",
        "N",
        "concurrent HTTP/2 streams per client connection (default 100, as kube-apiserver)",
    ),
    (
        "--proxy-transport",
        "proxy.transport",
        "NAME",
        "upstream client: h1 (default), aiohttp, httpx, httpx-aiohttp",
    ),
    (
        "--upstream-connect-timeout",
        "proxy.connectTimeout",
        "DURATION",
        "upstream connect timeout (default 5s)",
    ),
    (
        "--upstream-ca-file",
        "proxy.upstreamCAFile",
        "FILE",
        "CAs for https:// upstreams without tls.caFile (default: the system's CAs)",
    ),
    (
        "--upstream-read-timeout",
        "proxy.readTimeout",
        "DURATION",
        "longest silence between upstream reads (default 60s)",
    ),
    (
        "--upstream-pool-timeout",
        "proxy.poolTimeout",
        "DURATION",
        "longest wait for a pooled upstream connection (default 5s)",
    ),
    (
        "--upstream-keepalive-expiry",
        "proxy.keepaliveExpiry",
        "DURATION",
        "idle upstream connections are closed after this (default 15s)",
    ),
    (
        "--websocket-max-message-bytes",
        "proxy.websocket.maxMessageBytes",
        "N",
        "largest WebSocket message either way; larger closes with 1009 (default 1048576)",
    ),
    (
        "--websocket-idle-timeout",
        "proxy.websocket.idleTimeout",
        "DURATION",
        "a WebSocket without messages either way is closed after this (default 4h)",
    ),
    (
        "--forward-identity",
        "proxy.forwardIdentity",
        "BOOL",
        "send X-Remote-User/-Group/-Extra-* upstream (default true)",
    ),
    (
        "--impersonation",
        "proxy.impersonation",
        "reject|strip|forward",
        "client Impersonate-* headers: refuse with 403 (default), drop, or pass upstream",
    ),
    (
        "--borrowing-adjustment-period",
        "borrowingAdjustmentPeriod",
        "DURATION",
        "how often seats move between priority levels (default 10s, as kube-apiserver)",
    ),
    (
        "--kubernetes-work-estimation",
        "workEstimation.kubernetes",
        "BOOL",
        "Kubernetes list/watch/mutation seats from learned sizes and watches (default true)",
    ),
    (
        "--max-list-seats",
        "workEstimation.maximumListSeats",
        "N",
        "most seats a list or watch may take (default 100)",
    ),
    (
        "--max-mutating-seats",
        "workEstimation.maximumMutatingSeats",
        "N",
        "most final seats a mutating request may take (default 10)",
    ),
    (
        "--adaptive-seat-time",
        "workEstimation.adaptive.seatTime",
        "DURATION",
        "adaptive rules: service time worth one seat (default 100ms)",
    ),
    (
        "--adaptive-max-seats",
        "workEstimation.adaptive.maximumSeats",
        "N",
        "adaptive rules: most seats a route may take (default 10)",
    ),
    (
        "--flow-control-objects",
        "flowControlObjects",
        "ensured|exact",
        "ensured (default): Kubernetes' suggested and mandatory objects are added as its ensurer "
        "adds them; exact: only the --config objects, plus the mandatory ones",
    ),
    (
        "--access-log",
        "accessLog.enabled",
        "BOOL",
        "one line per request (default true), written off the event loop; full queue: dropped",
    ),
    (
        "--access-log-format",
        "accessLog.format",
        "json|combined",
        "access log lines: JSON (default) or nginx's combined format",
    ),
    (
        "--access-log-path",
        "accessLog.path",
        "FILE",
        "where access log lines go: - for standard output (default) or a file (reopened on "
        "SIGUSR1, for logrotate); needs a restart",
    ),
    (
        "--access-log-queue-size",
        "accessLog.queueSize",
        "N",
        "lines waiting to be written; more are dropped and counted (default 10000)",
    ),
    (
        "--request-id-header",
        "requestIDHeader",
        "NAME",
        "request ID header: kept from the client when safe, else generated (default X-Request-Id)",
    ),
    (
        "--max-config-bytes",
        "maxConfigBytes",
        "N",
        "most bytes the --config files may hold, YAML aliases expanded (default 2 MiB)",
    ),
    (
        "--max-config-objects",
        "maxConfigObjects",
        "N",
        "most documents and list items in the --config files (default 1000)",
    ),
    (
        "--max-config-errors",
        "maxConfigErrors",
        "N",
        "configuration errors listed; the rest are counted (default 100)",
    ),
]
INT_FLAGS = {
    "maxRequestsInflight",
    "maxMessageBytes",
    "maxMutatingRequestsInflight",
    "maximumListSeats",
    "maximumMutatingSeats",
    "maximumSeats",
    "maxConfigBytes",
    "maxConfigObjects",
    "maxConfigErrors",
    "maxHeaderBytes",
    "maxConnections",
    "maxQueuedBodyBytes",
    "maxStreamsPerConnection",
    "headerTableSize",
    "initialWindowSize",
    "maxResetStreams",
    "maxControlFrames",
    "queueSize",
}
LIST_FLAGS = {
    "debugAllowedGroups",
    "metricsAllowedGroups",
    "allowedCIDRs",
    "usernameHeaders",
    "groupHeaders",
    "extraHeaderPrefixes",
    "allowedNames",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the front door (APF reverse proxy)",
        description="Run the front door: authentication, API Priority and Fairness, reverse "
        "proxy. Settings come from GatewayConfiguration documents in --config paths, which may "
        "also hold FlowSchemas and PriorityLevelConfigurations (default: Kubernetes' mandatory "
        "and suggested objects); flags override the documents.",
    )
    parser.add_argument(
        "--config",
        action="extend",
        nargs="+",
        default=[],
        metavar="PATH",
        help="YAML files or folders (repeatable); reloaded on change or SIGHUP",
    )
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="[PREFIX=]URL",
        help="upstream base URL, optionally for a path prefix (repeatable)",
    )
    parser.add_argument(
        "--upstream-error-format",
        action="append",
        default=[],
        metavar="PREFIX=FORMAT",
        help="shape of the front door's own errors on the --upstream with this prefix: "
        "kubernetes (default) or openwhisk",
    )
    parser.add_argument(
        "--upstream-token-file",
        action="append",
        default=[],
        metavar="PREFIX=PATH",
        help="authenticate to the --upstream with this prefix with the token in PATH "
        "(Authorization: Bearer, replacing the client's): upstreams[].bearerTokenFile",
    )
    parser.add_argument(
        "--tls-sni-cert-key",
        action="append",
        default=[],
        metavar="CERT,KEY[:NAME1,NAME2]",
        help="a certificate for the SNI names given, or else its own names (repeatable; "
        "names may be wildcards such as *.example.com)",
    )
    parser.add_argument(
        "--route-template",
        action="append",
        default=[],
        metavar="PATH[=RESOURCE]",
        help="describe a non-Kubernetes API path, e.g. /v2/{namespace}/items/{name}",
    )
    for flag, path, metavar, text in FLAGS:
        nargs = "?" if metavar == "BOOL" else None
        parser.add_argument(
            flag,
            dest=_dest(path),
            metavar=metavar,
            help=text,
            nargs=nargs,
            const="true" if nargs else None,
        )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.set_defaults(func=run)


def _dest(path: str) -> str:
    return "cfg__" + path.replace(".", "__")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The flags that were given, in GatewayConfiguration document shape."""
    out: dict[str, Any] = {}
    for _flag, path, _metavar, _text in FLAGS:
        value = getattr(args, _dest(path))
        if value is None:
            continue
        keys = path.split(".")
        if keys[-1] in INT_FLAGS:
            value = int(value) if value.lstrip("-").isdigit() else value
        elif keys[-1] in LIST_FLAGS:
            value = [v.strip() for v in value.split(",") if v.strip()]
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    if args.upstream:
        ups = []
        for spec in args.upstream:
            prefix, sep, url = spec.partition("=")
            ups.append(
                {"prefix": prefix, "url": url} if sep and prefix.startswith("/") else {"url": spec}
            )
        out["upstreams"] = ups
    for flag, key, specs in (
        ("--upstream-error-format", "errorFormat", args.upstream_error_format),
        ("--upstream-token-file", "bearerTokenFile", args.upstream_token_file),
    ):
        for spec in specs:
            # a file path may hold "=", a format never does
            split = spec.partition if flag.endswith("file") else spec.rpartition
            prefix, _, value = split("=")
            wanted = prefix or "/"
            matching = [u for u in out.get("upstreams", []) if u.get("prefix", "/") == wanted]
            if not matching:
                raise ValueError(f"{flag} {spec}: no --upstream has prefix {prefix!r}")
            for u in matching:
                u[key] = value  # validated with the other settings
    if args.tls_sni_cert_key:
        out.setdefault("tls", {})["sniCertKeys"] = [sni_cert_key(v) for v in args.tls_sni_cert_key]
    if args.route_template:
        templates = []
        for spec in args.route_template:
            path, sep, resource = spec.partition("=")
            templates.append({"path": path, "resource": resource} if sep else {"path": spec})
        out["routeTemplates"] = templates
    return out


def sni_cert_key(spec: str) -> dict[str, Any]:
    """kube's ``cert,key[:name1,name2]``."""
    files, _, names = spec.partition(":")
    cert, sep, key = files.partition(",")
    if not sep or not cert or not key or "," in key:
        raise ValueError(f"--tls-sni-cert-key {spec}: expected CERT,KEY[:NAME1,NAME2]")
    out: dict[str, Any] = {"certFile": cert, "keyFile": key}
    if names:
        out["names"] = [n.strip() for n in names.split(",") if n.strip()]
    return out


def tune_gc() -> None:
    """After startup: freeze what exists (config, tables, modules) out of the collector's
    sight, and collect the young generation every 10,000 allocations instead of 700.

    Measured in docs/performance.md ("Front door"): with the defaults the cyclic collector
    took 15-45 us of every proxied request, re-scanning long-lived objects; this roughly
    halves the CPU spent per request. Memory held by real garbage cycles waits a little
    longer, which a proxy's short-lived, mostly acyclic objects do not notice.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 100)


def run(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - per-command import
    import uvloop  # noqa: PLC0415 - per-command import

    from gateway.server import Gateway, uvicorn_config  # noqa: PLC0415 - per-command import
    from gateway.serving.listen import listen_sockets, reason  # noqa: PLC0415 - per-command import
    from gateway.settings.sources import ConfigLoadError, load_config  # noqa: PLC0415 - per-command import

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        overrides = overrides_from_args(args)
        loaded = load_config(args.config, overrides)
        gateway = Gateway(loaded, loop=loop)
    except (ConfigLoadError, ValueError, OSError) as exc:
        print(f"apf-gateway serve: {exc}", file=sys.stderr)
        return 2
    host, port = loaded.settings.host_port
    try:  # before anything starts: a taken port is one line and exit 2, as in 'up'
        sockets = listen_sockets(host, port)
    except OSError as exc:
        print(f"apf-gateway serve: cannot listen on {loaded.settings.listen}: {reason(exc)}",
              file=sys.stderr)  # fmt: skip
        loop.close()
        return 2
    if loaded.settings.tls.enabled:
        from gateway.serving.tls import bound_handshakes  # noqa: PLC0415 - per-command import

        bound_handshakes(loop, loaded.settings.client.header_timeout)
    gateway.enable_reload(loaded, args.config, overrides)
    gateway.on_startup.append(tune_gc)
    from gateway.compiled import compiled_modules  # noqa: PLC0415 - per-command import

    compiled = compiled_modules()
    logging.getLogger("gateway.serve").info(
        "admission hot path: %s; HTTP/1.1: %s; TLS: %s",
        f"compiled ({len(compiled)} modules, mypyc)" if compiled else "interpreted",
        loaded.settings.http_implementation,
        f"on (minimum {loaded.settings.tls.min_version})" if gateway.tls else "off",
    )
    import resource  # noqa: PLC0415 - per-command import

    from gateway.serving.limits import file_limit_warning  # noqa: PLC0415 - per-command import

    soft_files, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    warning = file_limit_warning(loaded.settings, soft_files)
    if warning:
        logging.getLogger("gateway.serve").warning(warning)
    config = uvicorn_config(gateway, log_level=args.log_level)
    uvicorn_logger = logging.getLogger("uvicorn.error")

    class DrainingServer(uvicorn.Server):
        """SIGTERM drains and exits 0 (uvicorn would re-raise the signal after shutdown)."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not self.should_exit and sig in (signal.SIGTERM, signal.SIGINT):
                gateway.begin_drain()
            if sig == signal.SIGTERM:
                self.should_exit = True
                return
            super().handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            """uvicorn announces the address only when it binds it; say it as it would."""
            await super().startup(sockets)
            if self.started and sockets:
                shown = f"[{host}]" if ":" in host else host
                uvicorn_logger.info(
                    "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)",
                    "https" if self.config.ssl else "http",
                    shown,
                    sockets[0].getsockname()[1],
                )

    server = DrainingServer(config)
    try:
        loop.run_until_complete(server.serve(sockets=sockets))
    finally:
        loop.close()
    return 0 if server.started else 1
