"""Authentication metrics with kube-apiserver's names (``apiserver/pkg/server/options``
authentication config controller): automatic reloads of ``--authentication-config``."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "apiserver_authentication_config_controller_automatic_reload"


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

    def observe_config_reload(self, ok: bool) -> None:
        status = "success" if ok else "failure"
        self.reloads[status] += 1
        self.last[status] = self.wall()

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily(
            f"{PREFIX}s",
            "Total number of automatic reloads of authentication configuration split by status "
            "and apiserver identity.",
            labels=["apiserver_id_hash", "status"],
        )
        for status, n in self.reloads.items():
            total.add_metric([self.id_hash, status], n)
        yield total
        last = GaugeMetricFamily(
            f"{PREFIX}_last_timestamp_seconds",
            "Timestamp of the last automatic reload of authentication configuration split by "
            "status and apiserver identity.",
            labels=["apiserver_id_hash", "status"],
        )
        for status, when in sorted(self.last.items()):
            last.add_metric([self.id_hash, status], when)
        yield last
