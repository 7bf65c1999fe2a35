"""The fairness report as Markdown (``report.md``) and as the runner's console summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def finite(x: Any) -> Any:
    """JSON has no NaN: write null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def _f(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# Load test `{r['scenario']}`", "", r.get("description", ""), ""]
    for ph in r["phases"]:
        lines += [
            f"## Phase `{ph['name']}` ({ph['start']:.0f}-{ph['end']:.0f} s), "
            f"Jain (normalized goodput) = {_f(ph['jain'], 4)}",
            "",
            "| tenant | level | goodput/s | fair/s | norm. | 429 (reasons) | failed "
            "| wait p50 ms | wait p99 ms | latency p99 ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, s in ph["tenants"].items():
            if not s["requests"]:
                continue
            reasons = ", ".join(f"{k} {v}" for k, v in s["rejectReasons"].items())
            lines.append(
                f"| {name} | {s.get('level', '-')} | {_f(s['goodput'])} "
                f"| {_f(s.get('fairGoodput'))} | {_f(s.get('normalized'), 3)} "
                f"| {s['rejected']}{f' ({reasons})' if reasons else ''} | {s['failed']} "
                f"| {_f(s['wait']['p50'] * 1000)} | {_f(s['wait']['p99'] * 1000)} "
                f"| {_f(s['latency']['p99'] * 1000)} |"
            )
        lines.append("")
    lines += [
        "## Server view (APF metrics, run delta)",
        "",
        "| level | nominal seats | dispatched | rejected | wait p50 ms | wait p99 ms "
        "| mean exec ms | mean seat utilization |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lv, i in r["server"]["levels"].items():
        lines.append(
            f"| {lv} | {_f(i['nominalSeats'], 0)} | {_f(i['dispatched'], 0)} "
            f"| {_f(i['rejected'], 0)} | {_f(i['waitP50'] * 1000)} | {_f(i['waitP99'] * 1000)} "
            f"| {_f(i['meanExecSeconds'] * 1000)} | {_f(i['meanSeatUtilization'], 3)} |"
        )
    if r["server"]["rejected"]:
        lines += ["", "Rejections by reason (rejected_requests_total delta):", ""]
        for rej in r["server"]["rejected"]:
            lines.append(
                f"- {rej.get('priority_level')} / {rej.get('flow_schema')} / "
                f"{rej.get('reason')}: {rej['count']:.0f}"
            )
    g = r["generator"]
    lines += [
        "",
        f"Load generator: {g['processes']} process(es), busiest at "
        f"{g['cpu']['busiestMeanPercent']:.0f}% CPU, Locust CPU warning: {g['cpuWarning']}"
        + (" - **the generator was the bottleneck**" if g["bottleneck"] else ""),
        "",
    ]
    servers = g["cpu"].get("servers") or {}
    if servers:
        lines += [
            "System under test CPU (mean / max % of one core): "
            + ", ".join(f"{k} {v['mean']:.0f} / {v['max']:.0f}" for k, v in servers.items()),
            "",
        ]
    if r["events"]:
        lines += ["Events:", ""] + [f"- {json.dumps(finite(e))}" for e in r["events"]] + [""]
    t = r["totals"]
    lines += [
        f"Totals: {t['requests']} requests, {t['ok']} ok, {t['rejected']} 429, "
        f"{t['failed']} failed {t['failures'] or ''}",
        "",
        "## Targets",
        "",
    ]
    for tg in r["targets"]:
        lines.append(f"- {'MET' if tg['met'] else 'NOT MET'}: {tg['name']} - {tg['detail']}")
    lines += ["", *[f"![{Path(p).stem}](plots/{Path(p).name})" for p in r.get("plots", [])], ""]
    return "\n".join(lines)


def summary_text(r: dict[str, Any]) -> str:
    out = []
    for ph in r["phases"]:
        out.append(f"phase {ph['name']}: Jain {_f(ph['jain'], 4)}")
        for name, s in ph["tenants"].items():
            if s["requests"]:
                out.append(
                    f"  {name:14s} goodput {_f(s['goodput']):>6}/s"
                    f" fair {_f(s.get('fairGoodput')):>6}"
                    f" 429 {s['rejected']:5d} failed {s['failed']:4d}"
                    f" wait p99 {_f(s['wait']['p99'] * 1000):>7} ms"
                )
    for tg in r["targets"]:
        out.append(f"{'MET    ' if tg['met'] else 'NOT MET'} {tg['name']}: {tg['detail']}")
    return "\n".join(out)
