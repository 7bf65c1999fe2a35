"""In-process (sidecar) use: API Priority and Fairness in front of your own ASGI app.

``build_middleware`` is the one public call: it reads the same ``--config`` files and settings
as ``apf-gateway serve`` (``gateway.settings.sources.load_config``: FlowSchemas and
PriorityLevelConfigurations, with Kubernetes' mandatory and suggested objects ensured as the
API server ensures them, and an optional ``GatewayConfiguration`` document), and builds the
same admission stack as ``serve`` (``gateway.apfstack``) with the app in place of the proxy:
the same authenticators (token file, OpenWhisk keys, front-proxy headers from trusted networks,
the JWT issuers of ``authenticationConfig``, the token webhook) awaited and checked in the same
place (decision 0029). Client certificates are refused: they need ``serve``'s TLS listener.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.apfstack import build_controller, build_describer, build_flow_control
from gateway.asgi.endpoints import LocalEndpoints
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.clock import AsyncioEventClock
from gateway.http.types import ASGIApp
from gateway.settings.load import merge
from gateway.settings.sources import load_config

log = logging.getLogger("gateway.sidecar")

# GatewayConfiguration keys that only ``apf-gateway serve`` reads (its listener, proxy and
# reload): stated for a sidecar they are ignored, with a warning.
SERVE_ONLY = ("listen", "tls", "upstreams", "proxy", "client", "httpImplementation",
              "shutdownGracePeriod", "configPollInterval")  # fmt: skip
# Client certificates reach the authenticator from serve's own TLS listener
# (``gateway.serving``); the app's server does not hand them to the app (uvicorn passes no
# client certificate at all), so these would authenticate no one in-process: refused rather
# than silently inert (decision 0029).
LISTENER_ONLY = ("authentication.clientCAFile", "authentication.requestHeader.clientCAFile")


def build_middleware(
    app: ASGIApp,
    *,
    config_files: Sequence[str | Path] = (),
    token_file: str | Path | None = None,
    settings: Mapping[str, Any] | None = None,
    registry: CollectorRegistry | None = None,
) -> FlowControlMiddleware:
    """``app`` behind APF admission, configured as ``apf-gateway serve`` is.

    ``config_files``: YAML/JSON files or folders (``serve --config``). ``token_file``:
    kube-apiserver's ``--token-auth-file`` CSV (``token,user,uid,"group1,group2"``), the same
    as ``settings={"authentication": {"tokenAuthFile": ...}}``. ``settings``: GatewayConfiguration
    keys in the document's camelCase shape, which win over the files' as flags do.
    ``registry``: where the APF and authentication metrics go (default: a registry of their
    own); the middleware serves it at ``/metrics`` and the APF debug dumps under
    ``/debug/api_priority_and_fairness/``, behind admission as kube-apiserver does.

    Reads and checks everything now, so a bad file fails at import, not at the first request:
    raises ``ConfigLoadError`` (naming file, document and field), ``CredentialFileError`` (a
    token file's line, a webhook kubeconfig), ``AuthenticationConfigError`` (the
    ``authenticationConfig`` file's fields, as kube names them) or ``ValueError`` (a setting
    the sidecar cannot honour, the ``jwt`` extra missing). The controller is built at the
    app's lifespan startup, on the running event loop its clock and borrowing need (or on the
    first request, for a server run without lifespan); lifespan shutdown stops borrowing and
    the issuers' key refreshes.
    """
    overrides = dict(settings or {})
    if token_file is not None:
        overrides = merge(overrides, {"authentication": {"tokenAuthFile": str(token_file)}})
    loaded = load_config(list(config_files), overrides)
    s = loaded.settings
    if not s.enable_priority_and_fairness:
        raise ValueError(
            f"{loaded.where}: enablePriorityAndFairness: false is for apf-gateway serve only; "
            "the sidecar middleware is API Priority and Fairness"
        )
    auth = s.authentication
    for key, value in zip(LISTENER_ONLY, (auth.client_ca_file, auth.request_header.client_ca_file),
                          strict=True):  # fmt: skip
        if value:
            raise ValueError(
                f"{loaded.where}: {key}: client certificates need apf-gateway serve's TLS "
                "listener; in-process, the app's server does not pass them to the app "
                "(front-proxy headers: use authentication.requestHeader.allowedCIDRs)"
            )
    for key in SERVE_ONLY:
        if key in loaded.stated:
            log.warning("%s: %s is ignored in-process (apf-gateway serve only)", loaded.where, key)
    registry = registry or CollectorRegistry(auto_describe=False)
    describer, _ = build_describer(s, registry)
    endpoints = LocalEndpoints(
        app, registry=registry, debug_groups=s.debug_allowed_groups,
        metrics_groups=s.metrics_allowed_groups,
    )  # fmt: skip
    clock = AsyncioEventClock()
    middleware, _ = build_flow_control(
        endpoints, loaded, controller=lambda: build_controller(endpoints, loaded, clock),
        now=clock.now, describer=describer,
    )  # fmt: skip
    return middleware
