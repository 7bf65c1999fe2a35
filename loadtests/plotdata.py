"""What the plots show, computed without matplotlib (so it is tested as plain functions).

Seats are time-averaged from the engine's own integral: the sampler reads
``gateway_flowcontrol_priority_level_seat_seconds_total`` (seats in use integrated over time)
and the engine's elapsed time under the level (``..._seat_utilization_count``, nanoseconds),
so Δseat-seconds / Δelapsed is the mean seats busy between two samples, however short the
requests. An instantaneous gauge sampled every few seconds mostly lands between a mouse's
100 ms requests and reads 0.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SEAT_SECONDS = "gateway_flowcontrol_priority_level_seat_seconds_total"
ELAPSED_NS = "apiserver_flowcontrol_priority_level_seat_utilization_count"
EXECUTING = "apiserver_flowcontrol_current_executing_seats"
LIMIT = "apiserver_flowcontrol_current_limit_seats"
#: tenants of these kinds share one colour and one legend entry (there are many of them)
GROUPED_KINDS = ("mouse",)
#: more tenants of other kinds than this: every kind is grouped
MAX_LEGEND_TENANTS = 10


@dataclass(frozen=True)
class Span:
    """The mean ``value`` over ``[start, end)`` (seconds since the load started)."""

    start: float
    end: float
    value: float


def averaged_seats(series: list[dict[str, Any]], level: str, t0: float) -> list[Span]:
    """Mean seats busy in ``level`` between consecutive samples. A sample without the counter
    (a failed scrape) or a counter that went back (the gateway restarted) leaves a gap."""
    out: list[Span] = []
    prev: tuple[float, float, float | None] | None = None
    for row in series:
        seat_seconds = row.get(SEAT_SECONDS, {}).get(level)
        if seat_seconds is None:
            prev = None
            continue
        elapsed_ns = row.get(ELAPSED_NS, {}).get(level)
        now = (row["t"] - t0, seat_seconds, elapsed_ns)
        if prev is not None:
            wall = now[0] - prev[0]
            if elapsed_ns is not None and prev[2] is not None:
                elapsed = (elapsed_ns - prev[2]) / 1e9  # the engine's clock: exact window
            else:
                elapsed = wall
            used = seat_seconds - prev[1]
            if used >= 0 and elapsed > 0 and wall > 0:
                out.append(Span(prev[0], now[0], used / elapsed))
        prev = now
    return out


def mean_over(spans: list[Span], start: float, end: float) -> float:
    """The time-weighted mean of ``spans`` over what of ``[start, end)`` they cover (NaN if
    none of it)."""
    covered = weighted = 0.0
    for s in spans:
        overlap = min(s.end, end) - max(s.start, start)
        if overlap > 0:
            covered += overlap
            weighted += s.value * overlap
    return weighted / covered if covered else math.nan


def sampled(series: list[dict[str, Any]], name: str, level: str, t0: float) -> list[Span]:
    """A gauge's instantaneous samples, each held until the next one (the limits)."""
    rows = [(r["t"] - t0, r[name].get(level, 0.0)) for r in series if name in r]
    return [Span(t, nxt, v) for (t, v), (nxt, _) in itertools.pairwise(rows)]


def step_xy(spans: list[Span]) -> tuple[list[float], list[float]]:
    """Points for a step line (``drawstyle="steps-post"``), NaN across gaps."""
    xs: list[float] = []
    ys: list[float] = []
    for i, s in enumerate(spans):
        if i and not math.isclose(spans[i - 1].end, s.start):
            xs.append(spans[i - 1].end)
            ys.append(math.nan)
        xs.append(s.start)
        ys.append(s.value)
        if i == len(spans) - 1 or not math.isclose(s.end, spans[i + 1].start):
            xs.append(s.end)
            ys.append(s.value)
    return xs, ys


def sample_interval(series: list[dict[str, Any]]) -> float:
    """The sampler's real interval: the median gap between samples (NaN below two)."""
    times = [r["t"] for r in series if "t" in r]
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return statistics.median(gaps) if gaps else math.nan


def interval_text(seconds: float) -> str:
    if math.isnan(seconds):
        return "no samples"
    return f"{round(seconds, 1):g} s"


def phase_spans(result: dict[str, Any]) -> list[tuple[str, float, float]]:
    return [(ph["name"], float(ph["start"]), float(ph["end"])) for ph in result["phases"]]


def legend_groups(tenants: list[dict[str, Any]]) -> dict[str, str]:
    """Tenant name -> its legend entry: mice (and every kind, when there are many others)
    pooled as ``"<kind> ×N"``; others by name."""
    counts: dict[str, int] = {}
    for t in tenants:
        counts[t["kind"]] = counts.get(t["kind"], 0) + 1
    many = sum(1 for t in tenants if t["kind"] not in GROUPED_KINDS) > MAX_LEGEND_TENANTS
    out = {}
    for t in tenants:
        kind = t["kind"]
        grouped = (kind in GROUPED_KINDS or many) and counts[kind] > 1
        out[t["name"]] = f"{kind} ×{counts[kind]}" if grouped else t["name"]
    return out


def _phase_of(phases: Iterable[tuple[str, float, float]], at: float) -> str | None:
    return next((name for name, start, end in phases if start <= at < end), None)


def waits_by_phase(
    events: list[dict[str, Any]],
    tenants: list[dict[str, Any]],
    result: dict[str, Any],
    t0: float,
) -> list[tuple[str, list[tuple[str, list[float]]]]]:
    """Per phase, per legend entry (mice pooled, as the wait targets judge them), the waits
    (latency − service time) of the successful requests that completed in it, as the report
    counts them."""
    phases = phase_spans(result)
    groups = legend_groups(tenants)
    order = list(dict.fromkeys(groups.values()))
    found: dict[str, dict[str, list[float]]] = {name: {} for name, _, _ in phases}
    for e in events:
        if not 200 <= e["status"] < 300 or e["tenant"] not in groups:
            continue
        phase = _phase_of(phases, e["t"] + e["latency"] - t0)
        if phase is None:
            continue
        wait = max(1e-4, e["latency"] - e.get("service", 0.0))
        found[phase].setdefault(groups[e["tenant"]], []).append(wait)
    return [
        (name, [(g, found[name][g]) for g in order if g in found[name]]) for name, _, _ in phases
    ]


def targets_of(result: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    """The evaluated targets judged on ``phase`` (their ``phase``, as the report records it)."""
    return [t for t in result.get("targets", []) if t.get("phase") == phase]
