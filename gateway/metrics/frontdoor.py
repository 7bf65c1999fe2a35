"""Metrics of the front door itself: upstream latency and errors, config reloads, and the
max-in-flight filter's counts (``apiserver_current_inflight_requests`` when APF is off).

Plain counters updated on the hot path, exported by a custom collector at scrape time, so a
request pays an attribute increment instead of a locked library call. Each configured
upstream's latency and error series exist from zero (``upstreams``), so that ``rate()`` sees
the first error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.flowcontrol.stats import Histogram


class InFlightWatermarks(Protocol):
    """What is read of the max-in-flight filter (``asgi.maxinflight.MaxInFlightMiddleware``):
    a protocol here, so that metrics import nothing of the request shell that feeds them."""

    @property
    def inflight(self) -> Iterable[str]: ...  # the request kinds

    def watermark(self, kind: str) -> int: ...


class ClosedConnections(Protocol):
    """What is read of the client limits (``serving.limits.ClientLimits``)."""

    @property
    def closed(self) -> Mapping[str, int]: ...  # connections closed, by reason


class AccessLogCounts(Protocol):
    """What is read of the access log's writer (``accesslog.writer.AccessLogWriter``)."""

    @property
    def written(self) -> int: ...

    @property
    def dropped(self) -> int: ...


class QueuedBodies(Protocol):
    """What is read of the queued requests' read-ahead (``asgi.readahead.ReadAheadBudget``)."""

    held: int
    peak: int
    stopped: int
    limit: int


UPSTREAM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ERROR_KINDS = ("connect", "timeout", "protocol")


def histogram_buckets(h: Histogram) -> list[tuple[str, float]]:
    return [("+Inf" if b == float("inf") else _le(b), c) for b, c in h.cumulative()]


def _le(bound: float) -> str:
    return repr(float(bound))


def _counter(name: str, documentation: str, label: str, counts: Mapping[str, int]) -> Metric:
    """A counter family with one label, from a dict of counts."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for value, n in counts.items():
        family.add_metric([value], n)
    return family


class FrontDoorMetrics(Collector):
    def __init__(self, upstreams: Iterable[str] = ()) -> None:
        self.upstream_latency: dict[str, Histogram] = {}
        self.upstream_errors: dict[tuple[str, str], int] = {}
        for upstream in upstreams:
            self.upstream_latency[upstream] = Histogram(UPSTREAM_BUCKETS)
            for kind in ERROR_KINDS:
                self.upstream_errors[(upstream, kind)] = 0
        self.reloads = {"success": 0, "failure": 0}
        self.last_reload_ok = 1
        self.reload_failures: dict[str, int] = {}
        self.maxinflight: InFlightWatermarks | None = None
        self.maxinflight_rejected = {"readOnly": 0, "mutating": 0}
        self.client: ClosedConnections | None = None
        self.access_log: AccessLogCounts | None = None
        self.read_ahead: QueuedBodies | None = None

    # Hot-path hooks ---------------------------------------------------------------------
    def observe_upstream(self, upstream: str, error: str, seconds: float) -> None:
        h = self.upstream_latency.get(upstream)
        if h is None:
            h = self.upstream_latency[upstream] = Histogram(UPSTREAM_BUCKETS)
        h.observe(seconds)
        if error:
            key = (upstream, error)
            self.upstream_errors[key] = self.upstream_errors.get(key, 0) + 1

    def observe_reload(self, ok: bool, reason: str = "") -> None:
        self.reloads["success" if ok else "failure"] += 1
        self.last_reload_ok = 1 if ok else 0
        if not ok:
            self.reload_failures[reason] = self.reload_failures.get(reason, 0) + 1

    def observe_maxinflight_reject(self, kind: str) -> None:
        self.maxinflight_rejected[kind] += 1

    # Export -----------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        lat = HistogramMetricFamily(
            "gateway_upstream_request_duration_seconds",
            "Time from sending a request upstream to receiving its response headers.",
            labels=["upstream"],
        )
        for upstream, h in sorted(self.upstream_latency.items()):
            lat.add_metric([upstream], histogram_buckets(h), h.sum)
        yield lat
        err = CounterMetricFamily(
            "gateway_upstream_errors",
            "Upstream requests that failed, by kind (connect -> 502, timeout -> 504, protocol).",
            labels=["upstream", "kind"],
        )
        for (upstream, kind), n in sorted(self.upstream_errors.items()):
            err.add_metric([upstream, kind], n)
        yield err
        yield _counter(
            "gateway_config_reloads", "Configuration reload attempts by result.", "result",
            self.reloads,
        )  # fmt: skip
        yield _counter(
            "gateway_config_reload_failures",
            "Refused configuration reloads by reason: invalid, syntax, empty, too_large, "
            "unreadable, credentials, security_key_missing, apply.",
            "reason",
            dict(sorted(self.reload_failures.items())),
        )
        yield GaugeMetricFamily(
            "gateway_config_last_reload_successful",
            "1 if the last configuration reload was applied, 0 if it was refused.",
            value=self.last_reload_ok,
        )
        if self.client is not None:
            yield _counter(
                "gateway_client_connections_closed",
                "Client connections the gateway closed or refused for a client limit, by reason "
                "(header_timeout, body_timeout, send_timeout, head_too_large, over_capacity, "
                "http2_protocol_error, http2_rapid_reset, http2_control_flood; on HTTP/2 the "
                "timeouts may reset one stream).",
                "reason", self.client.closed,
            )  # fmt: skip
        if self.access_log is not None:
            yield CounterMetricFamily(
                "gateway_access_log_lines",
                "Access log lines written.",
                value=self.access_log.written,
            )
            yield CounterMetricFamily(
                "gateway_access_log_dropped_lines",
                "Access log lines dropped: the queue was full (the writer fell behind) or a "
                "write failed.",
                value=self.access_log.dropped,
            )
        if self.read_ahead is not None:
            yield from _read_ahead(self.read_ahead)
        if self.maxinflight is not None:
            inflight = GaugeMetricFamily(
                "apiserver_current_inflight_requests",
                "Maximal number of currently used inflight request limit of this apiserver per "
                "request kind in last second.",
                labels=["request_kind"],
            )
            for kind in self.maxinflight.inflight:
                inflight.add_metric([kind], self.maxinflight.watermark(kind))
            yield inflight
            yield _counter(
                "gateway_maxinflight_rejected_requests",
                "Requests refused with 429 by the max-in-flight filter (APF disabled).",
                "request_kind", self.maxinflight_rejected,
            )  # fmt: skip


def _read_ahead(r: QueuedBodies) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "gateway_queued_request_body_bytes",
        "Request body bytes read ahead by requests waiting in APF queues.",
        value=r.held,
    )
    yield GaugeMetricFamily(
        "gateway_queued_request_body_bytes_peak",
        "Most request body bytes ever read ahead at once by queued requests.",
        value=r.peak,
    )
    yield GaugeMetricFamily(
        "gateway_queued_request_body_bytes_limit",
        "The budget of request body queued requests may read ahead (client.maxQueuedBodyBytes).",
        value=r.limit,
    )
    yield CounterMetricFamily(
        "gateway_queued_request_body_read_ahead_stopped",
        "Queued requests that stopped reading their body ahead (1 MiB each, or the budget).",
        value=r.stopped,
    )
