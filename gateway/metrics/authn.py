"""Authentication metrics with kube-apiserver's names: automatic reloads of
``--authentication-config`` (its authentication config controller) and the TokenReview webhook's
requests (``apiserver_delegated_authn_request_*``, what kube's generic API server exports for
the same call, with its buckets)."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.flowcontrol.stats import Histogram
from gateway.metrics.frontdoor import histogram_buckets

PREFIX = "apiserver_authentication_config_controller_automatic_reload"
WEBHOOK_BUCKETS = (0.25, 0.5, 0.7, 1.0, 1.5, 3.0, 5.0, 10.0)
# kube's oidc metrics: "default histogram buckets with a 1ms starting point"
JWT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def apiserver_id_hash(apiserver_id: str = "") -> str:
    """kube labels these metrics with ``sha256:<hex>`` of the API server's identity; ours is the
    host name (one front door per host and port is the common case)."""
    ident = apiserver_id or socket.gethostname()
    return "sha256:" + hashlib.sha256(ident.encode()).hexdigest()


class AuthenticationMetrics(Collector):
    def __init__(self, wall: Callable[[], float], apiserver_id: str = "") -> None:
        self.wall = wall
        self.id_hash = apiserver_id_hash(apiserver_id)
        self.reloads = {"success": 0, "failure": 0}
        self.last: dict[str, float] = {}
        self.webhook_requests: dict[str, int] = {}  # by HTTP code, "error": no response
        self.webhook_latency: dict[str, Histogram] = {}
        self.jwt_latency: dict[tuple[str, str], Histogram] = {}
        # authentication_attempts{result}, authentication_duration_seconds{result}: the
        # describer's (read at scrape time)
        self.attempts: Mapping[str, int] = {"success": 0, "failure": 0}
        self.durations: Mapping[str, Histogram] = {}

    def observe_jwt(self, issuer_hash: str, result: str, seconds: float) -> None:
        h = self.jwt_latency.get((result, issuer_hash))
        if h is None:
            h = self.jwt_latency[(result, issuer_hash)] = Histogram(JWT_BUCKETS)
        h.observe(seconds)

    def observe_webhook(self, code: str, seconds: float) -> None:
        self.webhook_requests[code] = self.webhook_requests.get(code, 0) + 1
        h = self.webhook_latency.get(code)
        if h is None:
            h = self.webhook_latency[code] = Histogram(WEBHOOK_BUCKETS)
        h.observe(seconds)

    def observe_config_reload(self, ok: bool) -> None:
        status = "success" if ok else "failure"
        self.reloads[status] += 1
        self.last[status] = self.wall()

    def collect(self) -> Iterator[Metric]:
        # kube's name has no _total (component-base counters); the sample keeps it so
        attempts = Metric(
            "authentication_attempts", "Counter of authenticated attempts.", "counter"
        )
        for result, n in self.attempts.items():
            attempts.add_sample("authentication_attempts", {"result": result}, n)
        yield attempts
        durations = HistogramMetricFamily(
            "authentication_duration_seconds",
            "Authentication duration in seconds broken out by result.",
            labels=["result"],
        )
        for result, h in sorted(self.durations.items()):
            durations.add_metric([result], histogram_buckets(h), h.sum)
        yield durations
        jwt = HistogramMetricFamily(
            "apiserver_authentication_jwt_authenticator_latency_seconds",
            "[ALPHA] Latency of jwt authentication operations in seconds. This is the time spent "
            "authenticating a token for cache miss only (i.e. when the token is not found in "
            "the cache).",
            labels=["result", "jwt_issuer_hash"],
        )
        for (result, issuer), h in sorted(self.jwt_latency.items()):
            jwt.add_metric([result, issuer], histogram_buckets(h), h.sum)
        yield jwt
        total = CounterMetricFamily(
            f"{PREFIX}s",
            "[ALPHA] Total number of automatic reloads of authentication configuration split by "
            "status and apiserver identity.",
            labels=["apiserver_id_hash", "status"],
        )
        for status, n in self.reloads.items():
            total.add_metric([self.id_hash, status], n)
        yield total
        last = GaugeMetricFamily(
            f"{PREFIX}_last_timestamp_seconds",
            "[ALPHA] Timestamp of the last automatic reload of authentication configuration "
            "split by status and apiserver identity.",
            labels=["apiserver_id_hash", "status"],
        )
        for status, when in sorted(self.last.items()):
            last.add_metric([self.id_hash, status], when)
        yield last
        requests = CounterMetricFamily(
            "apiserver_delegated_authn_request",
            "[ALPHA] Number of HTTP requests partitioned by status code.",
            labels=["code"],
        )
        for code, n in sorted(self.webhook_requests.items()):
            requests.add_metric([code], n)
        yield requests
        latency = HistogramMetricFamily(
            "apiserver_delegated_authn_request_duration_seconds",
            "[ALPHA] Request latency in seconds. Broken down by status code.",
            labels=["code"],
        )
        for code, h in sorted(self.webhook_latency.items()):
            latency.add_metric([code], histogram_buckets(h), h.sum)
        yield latency
