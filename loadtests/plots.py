"""PNG plots of a run (matplotlib, Agg backend: no display needed).

- ``throughput.png``: goodput (2xx/s) per tenant over time, 429s/s dotted;
- ``waits.png``: wait-time distribution per tenant, one panel per phase (box: p25-p75,
  whiskers p1-p99, log scale), each with the targets judged on it and their wait bounds;
- ``seats.png``: mean executing seats between samples (the engine's seat-seconds) and the
  current seat limit per priority level, labelled with the real sampling interval.

Every time plot shades and names each phase; mice (and every kind, when there are many
tenants) share one colour and one legend entry. What is drawn is computed in
``loadtests.plotdata``; the ``*_figure`` functions return the figure so a test can read its
labels. Small figures at a low DPI keep each file well under 200 KB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from loadtests import plotdata
from loadtests.plotdata import EXECUTING, LIMIT, averaged_seats, legend_groups, sampled, step_xy

DPI = 80
PHASE_COLOURS = ("#dbe9f6", "#e2f0d9", "#fbe5d6", "#ede2f6")


def _shade(ax: Any, result: dict[str, Any]) -> None:
    """Every phase shaded and named at the top of the axes; events as red lines."""
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + (hi - lo) * 0.15)  # room for the names above the data
    top = ax.get_xaxis_transform()  # x in data, y in axes fractions
    for i, (name, start, end) in enumerate(plotdata.phase_spans(result)):
        ax.axvspan(start, end, color=PHASE_COLOURS[i % len(PHASE_COLOURS)], zorder=0)
        ax.text((start + end) / 2, 0.98, name, transform=top, ha="center", va="top", fontsize=7)
    for ev in result.get("events", []):
        ax.axvline(ev["at"], color="red", linestyle="--", linewidth=1)
        ax.text(ev["at"], 0.90, f" {ev['action']}", transform=top, color="red", fontsize=7)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def throughput_figure(
    events: list[dict[str, Any]], t0: float, tenants: list[dict[str, Any]], result: dict[str, Any]
) -> Figure:
    duration = int(result["duration"]) + 1
    fig, ax = plt.subplots(figsize=(8, 4))
    groups = legend_groups(tenants)
    colours: dict[str, Any] = {}
    for t in tenants:
        ok = [0] * duration
        rej = [0] * duration
        for e in events:
            if e["tenant"] != t["name"]:
                continue
            i = int(e["t"] + e["latency"] - t0)
            if 0 <= i < duration:
                if 200 <= e["status"] < 300:
                    ok[i] += 1
                elif e["status"] == 429:
                    rej[i] += 1
        group = groups[t["name"]]
        first = group not in colours
        (line,) = ax.plot(
            range(duration),
            ok,
            linewidth=0.8 if group != t["name"] else 1.2,
            color=colours.get(group),
            label=group if first else None,
        )
        colours.setdefault(group, line.get_color())
        if any(rej):
            ax.plot(range(duration), rej, linestyle=":", linewidth=1, color=line.get_color())
    ax.set_xlabel("time (s)")
    ax.set_ylabel("goodput (2xx/s); dotted: 429/s")
    ax.set_title(f"{result['scenario']}: per-tenant throughput (kind ×N: N tenants, one colour)")
    _shade(ax, result)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(0, 0.88))
    return fig


def waits_figure(
    events: list[dict[str, Any]], t0: float, tenants: list[dict[str, Any]], result: dict[str, Any]
) -> Figure:
    per_phase = plotdata.waits_by_phase(events, tenants, result, t0)
    fig, axes = plt.subplots(
        1, max(1, len(per_phase)), figsize=(8, 4.5), sharey=True, squeeze=False
    )
    for ax, (phase, groups) in zip(axes[0], per_phase, strict=False):
        if groups:
            ax.boxplot([w for _, w in groups], whis=(1, 99), showfliers=False)
            ax.set_xticks(
                range(1, len(groups) + 1), [g for g, _ in groups], rotation=45, ha="right",
                fontsize=7,
            )  # fmt: skip
            ax.set_yscale("log")
        lines = []
        for t in plotdata.targets_of(result, phase):
            colour = "green" if t["met"] else "red"
            if "waitBound" in t:
                ax.axhline(t["waitBound"], color=colour, linestyle="--", linewidth=1)
            lines.append(("met: " if t["met"] else "MISSED: ") + t["name"])
        ax.set_title(phase, fontsize=9)
        for i, text in enumerate(lines):
            missed = text.startswith("MISSED")
            ax.text(
                0.02, 0.02 + 0.06 * i, text, transform=ax.transAxes, fontsize=6,
                color="red" if missed else "green", va="bottom",
            )  # fmt: skip
    axes[0][0].set_ylabel("wait = latency - service time (s)")
    fig.suptitle(
        f"{result['scenario']}: wait per tenant and phase (box p25-p75, whiskers p1-p99; "
        "dashed: a target's bound)",
        fontsize=9,
    )
    return fig


def seats_figure(series: list[dict[str, Any]], t0: float, result: dict[str, Any]) -> Figure:
    fig, ax = plt.subplots(figsize=(8, 4))
    levels = [lv for lv in result["server"]["levels"] if lv != "catch-all"]
    for lv in levels:
        spans, what = averaged_seats(series, lv, t0), "mean busy"
        if not spans:  # a gateway without the seat-seconds counter: its instantaneous gauge
            spans, what = sampled(series, EXECUTING, lv, t0), "busy (instantaneous samples)"
        xs, ys = step_xy(spans)
        (line,) = ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2, label=f"{lv} {what}")
        lx, ly = step_xy(sampled(series, LIMIT, lv, t0))
        if any(ly):
            ax.plot(
                lx, ly, drawstyle="steps-post", linestyle="--", linewidth=1,
                color=line.get_color(), label=f"{lv} limit",
            )  # fmt: skip
    interval = plotdata.interval_text(plotdata.sample_interval(series))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("seats")
    ax.set_title(
        f"{result['scenario']}: seats per priority level, mean over each {interval} "
        "sample interval",
        fontsize=10,
    )
    _shade(ax, result)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, 0.88))
    return fig


def render(
    out: Path,
    events: list[dict[str, Any]],
    t0: float,
    series: list[dict[str, Any]],
    tenants: list[dict[str, Any]],
    result: dict[str, Any],
) -> list[str]:
    d = out / "plots"
    d.mkdir(exist_ok=True)
    _save(throughput_figure(events, t0, tenants, result), d / "throughput.png")
    _save(waits_figure(events, t0, tenants, result), d / "waits.png")
    _save(seats_figure(series, t0, result), d / "seats.png")
    return [str(d / n) for n in ("throughput.png", "waits.png", "seats.png")]
