"""The load-test plots tell the truth: seats time-averaged from the engine's seat-seconds (not
instantaneous samples that land between short requests), the real sampling interval, every
phase shaded and named, mice grouped in the legend, waits split by phase with the targets
judged there. Plain functions on synthetic samples; one render without a load run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from loadtests.plotdata import (
    ELAPSED_NS,
    EXECUTING,
    LIMIT,
    SEAT_SECONDS,
    Span,
    averaged_seats,
    interval_text,
    legend_groups,
    mean_over,
    sample_interval,
    sampled,
    step_xy,
    waits_by_phase,
)

pytest.importorskip("matplotlib", reason="the plots need the loadtest extra (matplotlib)")
from loadtests import plots  # after the skip: matplotlib is optional

T0 = 1000.0
LEVEL = "workload"


def row(
    t: float, seat_seconds: float | None, elapsed: float | None, **extra: Any
) -> dict[str, Any]:
    """A sampler row at ``T0 + t``: the mice keep ~2 seats busy, yet the instantaneous gauge
    (read between their 100 ms requests) says 0."""
    r: dict[str, Any] = {"t": T0 + t, EXECUTING: {LEVEL: 0.0}, LIMIT: {LEVEL: 10.0}, **extra}
    if seat_seconds is not None:
        r[SEAT_SECONDS] = {LEVEL: seat_seconds}
    if elapsed is not None:
        r[ELAPSED_NS] = {LEVEL: elapsed * 1e9}
    return r


SERIES = [
    row(0, 0.0, 0.0),
    row(5.25, 10.0, 5.0),  # the scrape came 250 ms late; the engine's clock says 5 s: 2 seats
    row(10, 10.0, 10.0),  # idle
    {"t": T0 + 15, "error": True},  # a failed scrape: a gap, not a made-up value
    row(20, 15.0, 20.0),
    row(25, 20.0, 25.0),  # 1 seat
    row(30, 1.0, 1.0),  # the gateway restarted (rolling restart): counters reset, a gap
    row(35, 6.0, 6.0),  # 1 seat again
]


def test_seats_are_time_averaged_from_the_engine_integral() -> None:
    assert averaged_seats(SERIES, LEVEL, T0) == [
        Span(0, 5.25, 2.0),
        Span(5.25, 10, 0.0),
        Span(20, 25, 1.0),
        Span(30, 35, 1.0),
    ]
    # what the old plot drew: instantaneous samples, 0 all along while the mice ran
    assert {s.value for s in sampled(SERIES, EXECUTING, LEVEL, T0)} == {0.0}


def test_without_the_engine_clock_the_wall_clock_is_used() -> None:
    series = [row(0, 0.0, None), row(4, 6.0, None)]
    assert averaged_seats(series, LEVEL, T0) == [Span(0, 4, 1.5)]
    assert averaged_seats([row(0, None, None), row(4, None, None)], LEVEL, T0) == []


def test_step_points_break_at_gaps() -> None:
    xs, ys = step_xy([Span(0, 5, 2.0), Span(5, 10, 0.0), Span(20, 25, 1.0)])
    assert xs == [0, 5, 10, 10, 20, 25]
    assert ys[:3] == [2.0, 0.0, 0.0] and math.isnan(ys[3]) and ys[4:] == [1.0, 1.0]


def test_the_real_sampling_interval_is_measured() -> None:
    assert sample_interval(SERIES) == 5.0
    assert interval_text(sample_interval(SERIES)) == "5 s"
    assert interval_text(sample_interval([{"t": 0.0}, {"t": 1.01}, {"t": 2.0}])) == "1 s"
    assert interval_text(sample_interval([])) == "no samples"


def tenants(mice: int = 8, elephants: int = 4) -> list[dict[str, Any]]:
    return [{"name": f"mouse-{i}", "kind": "mouse", "level": LEVEL} for i in range(mice)] + [
        {"name": f"elephant-{i}", "kind": "elephant", "level": LEVEL} for i in range(elephants)
    ]


def test_mice_share_one_legend_entry() -> None:
    groups = legend_groups(tenants())
    assert set(groups.values()) == {"mouse ×8", "elephant-0", "elephant-1", "elephant-2",
                                    "elephant-3"}  # fmt: skip
    many = legend_groups(tenants(mice=20, elephants=11))
    assert set(many.values()) == {"mouse ×20", "elephant ×11"}
    assert legend_groups([{"name": "solo", "kind": "mouse"}]) == {"solo": "solo"}


def result(met: bool = False) -> dict[str, Any]:
    return {
        "scenario": "mice-elephants",
        "duration": 45.0,
        "server": {"levels": {LEVEL: {}, "catch-all": {}}},
        "phases": [
            {"name": "unloaded", "start": 3.0, "end": 14.5},
            {"name": "loaded", "start": 20.0, "end": 44.0},
        ],
        "events": [{"action": "elephants arrive", "at": 15.0}],
        "targets": [
            {
                "name": "mouse p99 wait <= 1.5x unloaded p99 + 100 ms",
                "met": met,
                "detail": "",
                "waitBound": 0.2,
                "kind": "mouse",
                "phase": "loaded",
            },
            {"name": "no failures", "met": True, "detail": ""},
        ],
    }


def events() -> list[dict[str, Any]]:
    out = []
    for i in range(60):
        t = T0 + i * 0.7
        loaded = t - T0 > 20
        out.append({"tenant": f"mouse-{i % 8}", "t": t, "latency": 0.15 + (0.3 if loaded else 0),
                    "service": 0.1, "status": 200})  # fmt: skip
        out.append({"tenant": f"elephant-{i % 4}", "t": t, "latency": 1.1, "service": 0.1,
                    "status": 200 if i % 5 else 429})  # fmt: skip
    return out


def test_waits_are_split_by_phase_with_the_mice_pooled() -> None:
    split = dict(waits_by_phase(events(), tenants(), result(), T0))
    assert list(split) == ["unloaded", "loaded"]
    unloaded, loaded = dict(split["unloaded"]), dict(split["loaded"])
    assert next(iter(unloaded)) == "mouse ×8"
    assert all(w == pytest.approx(0.05) for w in unloaded["mouse ×8"])
    assert all(w == pytest.approx(0.35) for w in loaded["mouse ×8"])
    # by completion time; 429s are no waits; requests between phases count in none
    assert sum(len(w) for w in unloaded.values()) + sum(len(w) for w in loaded.values()) < 120


def texts(fig: Any) -> list[str]:
    found = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        found += [ax.get_title(), *(t.get_text() for t in ax.texts)]
        legend = ax.get_legend()
        if legend is not None:
            found += [t.get_text() for t in legend.get_texts()]
    return found


def test_the_plots_name_the_interval_the_phases_and_the_missed_target(tmp_path: Path) -> None:
    r = result(met=False)
    seats = texts(plots.seats_figure(SERIES, T0, r))
    assert any("mean over each 5 s sample interval" in t for t in seats), seats
    assert not any("1/s" in t for t in seats)
    assert {"unloaded", "loaded", " elephants arrive"} <= set(seats)
    assert "workload mean busy" in seats and "workload limit" in seats
    waits = texts(plots.waits_figure(events(), T0, tenants(), r))
    assert {"unloaded", "loaded"} <= set(waits)
    assert "MISSED: mouse p99 wait <= 1.5x unloaded p99 + 100 ms" in waits
    throughput = texts(plots.throughput_figure(events(), T0, tenants(), r))
    legend = [t for t in throughput if t.startswith(("mouse", "elephant"))]
    assert legend == ["mouse ×8", "elephant-0", "elephant-1", "elephant-2", "elephant-3"]
    paths = plots.render(tmp_path, events(), T0, SERIES, tenants(), r)
    for p in paths:
        data = Path(p).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) < 200_000


def test_a_phase_mean_weights_each_interval_by_its_overlap() -> None:
    spans = averaged_seats(SERIES, LEVEL, T0)  # 2 seats on [0, 5.25), 0 on [5.25, 10), ...
    assert mean_over(spans, 0, 10) == pytest.approx((2 * 5.25) / 10)
    assert mean_over(spans, 3, 14.5) == pytest.approx((2 * 2.25) / 7)  # only [3, 10) covered
    assert math.isnan(mean_over(spans, 12, 18))  # a gap: no made-up value
