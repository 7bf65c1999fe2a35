"""Prometheus text exposition: parse, subtract two scrapes, read histogram quantiles.

Deltas between a scrape before and after the run isolate the run's counters from whatever the
gateway did before (readiness probes, warm-up). Timing-ratio histograms (APF's
``*_utilization``) have ``_sum``/``_count`` in value-nanoseconds, so their mean over a window is
``Δsum / Δcount`` like any other histogram.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]
PREFIX = "apiserver_flowcontrol_"


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def delta(before: Samples, after: Samples) -> Samples:
    """after - before for every series in ``after`` (series new in ``after`` count from 0)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def select(samples: Samples, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for (n, labels), v in samples.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == val for k, val in match.items()):
            out.append((d, v))
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(v for _, v in select(samples, name, **match))


def by_label(samples: Samples, name: str, label: str, **match: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for d, v in select(samples, name, **match):
        out[d.get(label, "")] = out.get(d.get(label, ""), 0.0) + v
    return out


@dataclass(frozen=True)
class Histogram:
    buckets: list[tuple[float, float]]  # (le, cumulative count), sorted, ending at +Inf
    sum: float
    count: float

    def quantile(self, q: float) -> float:
        """Linear interpolation inside the bucket, as PromQL's histogram_quantile does."""
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank = q * self.count
        prev_le, prev_c = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if math.isinf(le):
                    return prev_le
                if c == prev_c:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            prev_le, prev_c = le, c
        return prev_le

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan


def histogram(samples: Samples, name: str, **match: str) -> Histogram:
    """Sum of every series of histogram ``name`` whose labels match."""
    buckets: dict[float, float] = {}
    for d, v in select(samples, name + "_bucket", **match):
        le = float(d["le"])
        buckets[le] = buckets.get(le, 0.0) + v
    return Histogram(
        sorted(buckets.items()),
        total(samples, name + "_sum", **match),
        total(samples, name + "_count", **match),
    )


def label_values(samples: Samples, name: str, label: str) -> list[str]:
    return sorted({d[label] for d, _ in select(samples, name) if label in d})


def gauges(samples: Samples, names: Iterable[str], label: str) -> dict[str, dict[str, float]]:
    """{metric: {label value: value}} for the given gauge names."""
    return {n: by_label(samples, n, label) for n in names}
