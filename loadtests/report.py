"""The fairness report of one run: per-phase, per-tenant goodput against its max-min fair share,
Jain's index on normalized goodput, waits, rejections by reason, and the scenario's targets.

Sources: the per-request event log (client view: status, latency, upstream service time, 429
reason and Retry-After), the APF metrics scraped before and after (server view: rejections by
reason, wait histograms, executions, seat utilization) and the once-a-second seat gauges.
Client-side wait = latency - upstream service time (it includes the proxy's own overhead).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from loadtests import fairness, plotdata, promtext
from loadtests.render import finite, markdown, summary_text
from loadtests.scenario import seconds
from loadtests.targets import evaluate, members

M = promtext.PREFIX


def load_events(out: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for f in sorted((out / "events").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a killed process
    events.sort(key=lambda e: e["t"])
    return events


def phases_of(doc: dict[str, Any], duration: float) -> list[dict[str, Any]]:
    raw = doc.get("phases") or [
        {
            "name": "steady",
            "start": doc.get("warmup", min(5.0, duration / 5)),
            "end": max(duration - 1.0, duration * 0.9),  # the last second is ramp-down
        }
    ]
    return [
        {
            "name": p["name"],
            "start": seconds(p.get("start", 0), "phases[].start"),
            "end": min(seconds(p.get("end", duration), "phases[].end"), duration),
        }
        for p in raw
    ]


def _pct(values: list[float]) -> dict[str, float]:
    return {
        "p50": fairness.percentile(values, 0.50),
        "p90": fairness.percentile(values, 0.90),
        "p99": fairness.percentile(values, 0.99),
        "max": max(values) if values else math.nan,
    }


def tenant_stats(events: list[dict[str, Any]], length: float) -> dict[str, Any]:
    ok = [e for e in events if 200 <= e["status"] < 300]
    rejected = [e for e in events if e["status"] == 429 and "retryAfter" in e]
    failed = [e for e in events if e not in ok and e not in rejected]
    reasons: dict[str, int] = {}
    for e in rejected:
        reasons[e.get("reason") or "unknown"] = reasons.get(e.get("reason") or "unknown", 0) + 1
    waits = [max(0.0, e["latency"] - e.get("service", 0.0)) for e in ok]
    retry = [int(e["retryAfter"]) for e in rejected]
    return {
        "requests": len(events),
        "ok": len(ok),
        "rejected": len(rejected),
        "failed": len(failed),
        "failures": sorted({str(e.get("error", e["status"])) for e in failed})[:5],
        "goodput": len(ok) / length if length > 0 else math.nan,
        "rejectReasons": reasons,
        "retryAfter": {"min": min(retry), "max": max(retry)} if retry else None,
        "wait": _pct(waits),
        "latency": _pct([e["latency"] for e in ok]),
    }


def group_p99(events: list[dict[str, Any]]) -> dict[str, float]:
    """Pooled p99 wait and latency of a set of tenants' successful requests."""
    ok = [e for e in events if 200 <= e["status"] < 300]
    return {
        "wait": fairness.percentile(
            [max(0.0, e["latency"] - e.get("service", 0.0)) for e in ok], 0.99
        ),
        "latency": fairness.percentile([e["latency"] for e in ok], 0.99),
        "samples": float(len(ok)),
    }


def _mean_gauge(
    series: list[dict[str, Any]], metric: str, level: str, t0: float, start: float, end: float
) -> float:
    vals = [
        row[metric][level]
        for row in series
        if metric in row and level in row[metric] and start <= row["t"] - t0 < end
    ]
    return sum(vals) / len(vals) if vals else math.nan


def _mean_seats(
    series: list[dict[str, Any]], level: str, t0: float, start: float, end: float
) -> float:
    """Mean seats busy over a phase from the engine's seat-seconds (what ``seats.png``
    draws); from the instantaneous samples for a gateway without that counter."""
    mean = plotdata.mean_over(plotdata.averaged_seats(series, level, t0), start, end)
    if math.isnan(mean):
        return _mean_gauge(series, M + "current_executing_seats", level, t0, start, end)
    return mean


def demand_seats(spec: dict[str, Any], exec_time: float) -> float:
    users, seats = int(spec["users"]), int(spec.get("seats", 1))
    if spec.get("rate"):
        return fairness.rate_demand(users, seats, float(spec["rate"]), exec_time)
    return fairness.closed_loop_demand(users, seats, exec_time, float(spec.get("thinkTime", 0)))


def server_view(before: promtext.Samples, after: promtext.Samples) -> dict[str, Any]:
    d = promtext.delta(before, after)
    levels = promtext.label_values(after, M + "nominal_limit_seats", "priority_level")
    out: dict[str, Any] = {"levels": {}, "rejected": []}
    for lv in levels:
        wait = promtext.histogram(
            d, M + "request_wait_duration_seconds", priority_level=lv, execute="true"
        )
        ex = promtext.histogram(d, M + "request_execution_seconds", priority_level=lv)
        util = promtext.histogram(d, M + "priority_level_seat_utilization", priority_level=lv)
        seats = promtext.histogram(d, M + "work_estimated_seats", priority_level=lv)
        out["levels"][lv] = {
            "nominalSeats": promtext.total(after, M + "nominal_limit_seats", priority_level=lv),
            "currentLimitSeats": promtext.total(
                after, M + "current_limit_seats", priority_level=lv
            ),
            "dispatched": promtext.total(d, M + "dispatched_requests_total", priority_level=lv),
            "rejected": promtext.total(d, M + "rejected_requests_total", priority_level=lv),
            "waitP50": wait.quantile(0.5),
            "waitP99": wait.quantile(0.99),
            "meanExecSeconds": ex.mean,
            "meanSeatUtilization": util.mean,
            "meanEstimatedSeats": seats.mean,
        }
    for labels, v in promtext.select(d, M + "rejected_requests_total"):
        if v > 0:
            out["rejected"].append({**labels, "count": v})
    return out


def fair_shares(
    tenants: list[dict[str, Any]],
    stats: dict[str, Any],
    server: dict[str, Any],
    series: list[dict[str, Any]],
    t0: float,
    phase: dict[str, Any],
    service_time: float,
) -> None:
    """Adds fairSeats/fairGoodput/normalized to each tenant's phase stats (in place)."""
    by_level: dict[str, list[dict[str, Any]]] = {}
    for t in tenants:
        if stats.get(t["name"], {}).get("requests", 0) and not t.get("weight"):
            by_level.setdefault(t.get("level", ""), []).append(t)
    for lv, level_tenants in by_level.items():
        info = server["levels"].get(lv)
        if info is None or info["nominalSeats"] <= 0:
            continue  # exempt or unknown level: no fair share
        cap = _mean_gauge(series, M + "current_limit_seats", lv, t0, phase["start"], phase["end"])
        if math.isnan(cap):
            cap = info["currentLimitSeats"]
        exec_time = info["meanExecSeconds"]
        if math.isnan(exec_time):
            exec_time = service_time
        demands = [demand_seats(t, exec_time) for t in level_tenants]
        shares = fairness.max_min_fair(demands, cap)
        for t, demand, share in zip(level_tenants, demands, shares, strict=True):
            s = stats[t["name"]]
            fair_goodput = share / (int(t.get("seats", 1)) * exec_time)
            s.update(
                level=lv,
                capacitySeats=cap,
                demandSeats=demand,
                fairSeats=share,
                fairGoodput=fair_goodput,
                normalized=s["goodput"] / fair_goodput,
            )


def generate(out: Path) -> dict[str, Any]:
    run = json.loads((out / "run.json").read_text())
    events = load_events(out)
    series = json.loads((out / "timeseries.json").read_text())
    before = promtext.parse((out / "metrics-before.txt").read_text())
    after = promtext.parse((out / "metrics-after.txt").read_text())

    doc, tenants, duration = run["doc"], run["tenants"], float(run["duration"])
    service_time = seconds(doc.get("serviceTime", 0.1), "serviceTime")
    t0 = events[0]["t"] if events else run.get("loadStart", 0.0)
    server = server_view(before, after)
    result: dict[str, Any] = {
        "scenario": run["scenario"],
        "description": run.get("description", ""),
        "duration": duration,
        "serviceTime": service_time,
        "t0": t0,
        "server": server,
        "phases": [],
        "generator": {
            "processes": run["processes"],
            "cpu": run["locustCpu"],
            "cpuWarning": run["locustCpuWarning"],
            "bottleneck": run["generatorBottleneck"],
        },
        "events": [{**e, "at": e["t"] - t0} for e in run.get("events", [])],
        "balancer": run.get("balancer"),
        "gatewayExitCodes": run.get("gatewayExitCodes"),
    }
    for ph in phases_of(doc, duration):
        # By completion time: a request counts where its answer arrived (requests cut off at
        # the end of the run never complete and so never skew the last second).
        window = [e for e in events if ph["start"] <= e["t"] + e["latency"] - t0 < ph["end"]]
        length = ph["end"] - ph["start"]
        stats = {
            t["name"]: tenant_stats([e for e in window if e["tenant"] == t["name"]], length)
            for t in tenants
        }
        fair_shares(tenants, stats, server, series, t0, ph, service_time)
        normalized = [s["normalized"] for s in stats.values() if "normalized" in s]
        groups = {}
        for tg in doc.get("targets") or []:
            if "kind" in tg or "level" in tg:
                names = members(tenants, tg)
                groups[",".join(names)] = group_p99([e for e in window if e["tenant"] in names])
        result["phases"].append(
            {
                **ph,
                "tenants": stats,
                "jain": fairness.jain(normalized),
                "groupP99": groups,
                "seats": {
                    lv: {
                        "executing": _mean_seats(series, lv, t0, ph["start"], ph["end"]),
                        "limit": _mean_gauge(
                            series, M + "current_limit_seats", lv, t0, ph["start"], ph["end"]
                        ),
                        "nominal": _mean_gauge(
                            series, M + "nominal_limit_seats", lv, t0, ph["start"], ph["end"]
                        ),
                    }
                    for lv in server["levels"]
                },
            }
        )
    everything = tenant_stats(events, max(duration, 1e-9))
    result["totals"] = {k: everything[k] for k in ("requests", "ok", "rejected", "failed")}
    result["totals"]["failures"] = everything["failures"]
    result["targets"] = evaluate(doc.get("targets") or [], result, tenants)
    for spec, judged in zip(doc.get("targets") or [], result["targets"], strict=True):
        if isinstance(spec, dict) and "phase" in spec:
            judged.setdefault("phase", spec["phase"])  # the plots mark it in its phase
    from loadtests import plots  # noqa: PLC0415 - optional matplotlib

    result["plots"] = plots.render(out, events, t0, series, tenants, result)
    (out / "report.json").write_text(json.dumps(finite(result), indent=1))
    (out / "report.md").write_text(markdown(result))
    return result


__all__ = ["generate", "summary_text"]
