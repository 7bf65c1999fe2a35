"""PNG plots of a run (matplotlib, Agg backend: no display needed).

- ``throughput.png``: goodput (2xx/s) per tenant over time, 429s/s dotted, phases shaded;
- ``waits.png``: wait-time distribution per tenant (box: p25-p75, whiskers p1-p99, log scale);
- ``seats.png``: executing seats and the current seat limit per priority level over time.
Small figures at a low DPI keep each file well under 200 KB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DPI = 80
M = "apiserver_flowcontrol_"


def _shade(ax: Any, result: dict[str, Any]) -> None:
    for i, ph in enumerate(result["phases"]):
        if i % 2 == 0:
            ax.axvspan(ph["start"], ph["end"], color="0.93", zorder=0)
    for ev in result.get("events", []):
        ax.axvline(ev["at"], color="red", linestyle="--", linewidth=1)
        ax.text(ev["at"], ax.get_ylim()[1] * 0.95, f" {ev['action']}", color="red", fontsize=7)


def throughput(
    path: Path,
    events: list[dict[str, Any]],
    t0: float,
    tenants: list[dict[str, Any]],
    result: dict[str, Any],
) -> None:
    duration = int(result["duration"]) + 1
    fig, ax = plt.subplots(figsize=(8, 4))
    many = len(tenants) > 10
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
        (line,) = ax.plot(
            range(duration),
            ok,
            linewidth=1.2,
            label=None if many and t["kind"] == "mouse" else t["name"],
        )
        if any(rej):
            ax.plot(range(duration), rej, linestyle=":", linewidth=1, color=line.get_color())
    ax.set_xlabel("time (s)")
    ax.set_ylabel("goodput (2xx/s); dotted: 429/s")
    ax.set_title(f"{result['scenario']}: per-tenant throughput")
    _shade(ax, result)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def waits(
    path: Path, events: list[dict[str, Any]], tenants: list[dict[str, Any]], result: dict[str, Any]
) -> None:
    data, labels = [], []
    for t in tenants:
        w = [
            max(1e-4, e["latency"] - e.get("service", 0.0))
            for e in events
            if e["tenant"] == t["name"] and 200 <= e["status"] < 300
        ]
        if w:
            data.append(w)
            labels.append(t["name"])
    fig, ax = plt.subplots(figsize=(8, 4))
    if data:
        ax.boxplot(data, whis=(1, 99), showfliers=False)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=45, ha="right", fontsize=7)
        ax.set_yscale("log")
    ax.set_ylabel("wait = latency - service time (s)")
    ax.set_title(f"{result['scenario']}: wait per tenant (box p25-p75, whiskers p1-p99)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def seats(path: Path, series: list[dict[str, Any]], t0: float, result: dict[str, Any]) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    levels = [lv for lv in result["server"]["levels"] if lv != "catch-all"]
    for lv in levels:
        ts = [r["t"] - t0 for r in series if M + "current_executing_seats" in r]
        ex = [
            r[M + "current_executing_seats"].get(lv, 0.0)
            for r in series
            if M + "current_executing_seats" in r
        ]
        lim = [
            r[M + "current_limit_seats"].get(lv, 0.0)
            for r in series
            if M + "current_executing_seats" in r
        ]
        (line,) = ax.plot(ts, ex, linewidth=1.2, label=f"{lv} executing")
        if any(lim):
            ax.plot(
                ts, lim, linestyle="--", linewidth=1, color=line.get_color(), label=f"{lv} limit"
            )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("seats")
    ax.set_title(f"{result['scenario']}: seats per priority level (sampled 1/s)")
    _shade(ax, result)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


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
    throughput(d / "throughput.png", events, t0, tenants, result)
    waits(d / "waits.png", events, tenants, result)
    seats(d / "seats.png", series, t0, result)
    return [str(d / n) for n in ("throughput.png", "waits.png", "seats.png")]
