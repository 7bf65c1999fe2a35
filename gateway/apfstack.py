"""APF admission built from loaded settings: authentication with its metrics, the controller
with its metrics and debug dumps, work estimation, and ``FlowControlMiddleware`` around the
gateway's local endpoints.

One builder for both uses, so they cannot drift apart: ``apf-gateway serve``
(``server.Gateway``, in front of the proxy) and in-process use (``gateway.sidecar``, in front
of an application).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from gateway.apfconfig import bootstrap
from gateway.asgi.describe import RequestDescriber
from gateway.asgi.endpoints import LocalEndpoints
from gateway.asgi.errorformat import PathFormat
from gateway.asgi.flowcontrol import Estimator, FlowControlMiddleware, unit_estimator
from gateway.asgi.workestimate import GatewayEstimator, LearningApp
from gateway.clock import EventClock
from gateway.flowcontrol import debug
from gateway.flowcontrol.controller import FlowController
from gateway.http.types import ASGIApp
from gateway.metrics.apf import APFMetrics
from gateway.metrics.authn import AuthenticationMetrics
from gateway.settings.model import GatewaySettings
from gateway.settings.sources import LoadedConfig


def build_describer(
    settings: GatewaySettings, registry: CollectorRegistry
) -> tuple[RequestDescriber, AuthenticationMetrics]:
    """Authentication and request info from ``settings`` (reads the credential files and the
    ``--authentication-config``; raises ``CredentialFileError``/``ValueError`` naming them),
    with kube's authentication metrics registered in ``registry`` and fed by the describer."""
    describer = RequestDescriber.from_settings(settings.authentication, settings.route_templates)
    metrics = AuthenticationMetrics(time.time)
    registry.register(metrics)
    describer.on_authentication_config_reload = metrics.observe_config_reload
    describer.on_webhook_request = metrics.observe_webhook
    describer.on_jwt_verify = metrics.observe_jwt
    describer.wire(describer.authenticator)
    metrics.attempts = describer.attempts
    metrics.durations = describer.durations
    return describer, metrics


def build_controller(
    endpoints: LocalEndpoints, loaded: LoadedConfig, clock: EventClock
) -> FlowController:
    """The controller for ``loaded``; its metrics join the endpoints' registry (``/metrics``)
    and its state is served as the ``/debug/api_priority_and_fairness/`` dumps."""
    s = loaded.settings
    controller = FlowController(
        clock=clock, server_concurrency_limit=s.server_concurrency_limit,
        config=loaded.effective, mandatory=bootstrap.mandatory(),
    )  # fmt: skip
    show_hidden = bool(s.show_hidden_metrics_for_version)
    endpoints.registry.register(APFMetrics(controller, show_hidden=show_hidden))
    wall_offset = time.time() - time.monotonic()
    endpoints.dumps = {
        "dump_priority_levels": lambda _details: debug.dump_priority_levels(controller),
        "dump_queues": lambda _details: debug.dump_queues(controller),
        "dump_requests": lambda details: debug.dump_requests(
            controller, include_details=details, to_wall=lambda t: t + wall_offset
        ),
    }
    return controller


def build_flow_control(
    endpoints: LocalEndpoints,
    loaded: LoadedConfig,
    *,
    controller: FlowController | Callable[[], FlowController],
    now: Callable[[], float],
    describer: RequestDescriber,
    estimator: Estimator = unit_estimator,
    error_format: PathFormat | None = None,
) -> tuple[FlowControlMiddleware, GatewayEstimator | None]:
    """``FlowControlMiddleware`` in front of ``endpoints``, set up from ``loaded.settings``.

    Without an ``estimator`` of the caller's, requests are estimated by the configured work
    estimation (returned, for reloads), which learns from responses through ``LearningApp``.
    ``controller`` may be a factory: the middleware builds it on first use, on the running
    loop, and starts its borrowing there."""
    s = loaded.settings
    inner: ASGIApp = endpoints
    work_estimator: GatewayEstimator | None = None
    if estimator is unit_estimator:
        work_estimator = GatewayEstimator(s.work_estimation, now)
        estimator = work_estimator
        inner = LearningApp(endpoints, work_estimator)
    middleware = FlowControlMiddleware(
        inner,
        controller=controller,
        describer=describer,
        estimator=estimator,
        borrowing_period=s.borrowing_adjustment_period,
        request_timeout=s.request_timeout,
        status_body=s.too_many_requests_body == "status",
        error_format=error_format,
        max_queued_body_bytes=s.client.max_queued_body_bytes,
    )
    return middleware, work_estimator
