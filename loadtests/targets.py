"""The checks a scenario's ``targets:`` list names, evaluated on a finished report.

Each returns ``{"name", "met", "detail"}`` with the numbers in ``detail``, so a report says not
only whether a target was met but by how much.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Doc = dict[str, Any]
Tenants = list[Doc]
Check = Callable[[Doc, Doc, Tenants], Doc]


def _phase(result: dict[str, Any], name: str | None) -> dict[str, Any]:
    phases: list[Doc] = result["phases"]
    if name is None:
        return phases[-1]
    for ph in phases:
        if ph["name"] == name:
            return ph
    raise ValueError(f"targets: no phase {name!r}")


def members(tenants: list[dict[str, Any]], t: dict[str, Any]) -> list[str]:
    return [
        x["name"]
        for x in tenants
        if ("kind" not in t or x["kind"] == t["kind"])
        and ("level" not in t or x.get("level") == t["level"])
    ]


def _jain(t: Doc, r: Doc, tenants: Tenants) -> Doc:
    ph = _phase(r, t.get("phase"))
    j = ph["jain"]
    return {
        "name": f"Jain >= {t['min']} ({ph['name']})",
        "met": j >= float(t["min"]),
        "detail": f"J = {j:.4f}",
    }


def _no_failures(t: Doc, r: Doc, _: Tenants) -> Doc:
    tot = r["totals"]
    return {
        "name": "no unexpected failures",
        "met": tot["failed"] == 0,
        "detail": f"{tot['failed']} failed of {tot['requests']} "
        f"({tot['rejected']} expected 429s) {tot['failures'] or ''}",
    }


def _no_rejects(t: Doc, r: Doc, tenants: Tenants) -> Doc:
    names = members(tenants, t)
    ph = _phase(r, t.get("phase"))
    n = sum(ph["tenants"][x]["rejected"] for x in names)
    return {
        "name": f"no {t.get('kind', 'tenant')} rejected ({ph['name']})",
        "met": n == 0,
        "detail": f"{n} rejections across {len(names)} tenants",
    }


def _group(ph: dict[str, Any], names: list[str]) -> dict[str, float]:
    return dict(ph.get("groupP99", {}).get(",".join(names), {}))


def _wait_bound(t: Doc, r: Doc, tenants: Tenants) -> Doc:
    """Judged on the tenants' pooled p99 (per-tenant p99s of a few dozen samples are their
    maxima); the per-tenant outcome is in the detail."""
    names = members(tenants, t)
    base_ph, load_ph = _phase(r, t["baseline"]), _phase(r, t["phase"])
    factor = float(t.get("factor", 1.5))
    svc = r["serviceTime"] if t.get("plusServiceTime", True) else 0.0
    b = _group(base_ph, names).get("wait", math.nan)
    lo = _group(load_ph, names).get("wait", math.nan)
    bound = factor * b + svc
    per = []
    for n in names:
        pb, pl = base_ph["tenants"][n]["wait"]["p99"], load_ph["tenants"][n]["wait"]["p99"]
        if not (math.isnan(pb) or math.isnan(pl)):
            per.append((pl - (factor * pb + svc), n, pb, pl))
    per.sort(reverse=True)
    worst = (
        f"; worst single {per[0][1]}: {per[0][2] * 1000:.1f} -> {per[0][3] * 1000:.1f} ms "
        f"({sum(1 for x in per if x[0] <= 0)}/{len(per)} tenants within their own bound)"
        if per
        else ""
    )
    return {
        "name": f"{t.get('kind', 'tenant')} p99 wait <= {factor}x unloaded p99 + "
        f"{svc * 1000:.0f} ms",
        "met": not math.isnan(lo) and lo <= bound,
        "detail": f"pooled unloaded p99 {b * 1000:.1f} ms -> loaded p99 {lo * 1000:.1f} ms "
        f"(bound {bound * 1000:.1f} ms){worst}",
        "waitBound": bound,  # seconds: the waits plot draws it on the judged phase
        "kind": t.get("kind", "tenant"),
    }


def _p99_unchanged(t: Doc, r: Doc, tenants: Tenants) -> Doc:
    names = members(tenants, t)
    metric = t.get("metric", "latency")
    within = float(t.get("within", 0.10))
    base_ph, load_ph = _phase(r, t["baseline"]), _phase(r, t["phase"])
    b = _group(base_ph, names).get(metric)
    lo = _group(load_ph, names).get(metric)
    if b is None or lo is None or math.isnan(b) or math.isnan(lo):
        return {"name": "p99 unchanged", "met": False, "detail": "no samples"}
    change = (lo - b) / b if b > 0 else math.inf
    return {
        "name": f"{'/'.join(names)} p99 {metric} within {within:.0%} of baseline",
        "met": change <= within,
        "detail": f"{b * 1000:.1f} ms -> {lo * 1000:.1f} ms ({change:+.1%})",
    }


def _reject_reason(t: Doc, r: Doc, _: Tenants) -> Doc:
    n = sum(x["count"] for x in r["server"]["rejected"] if x.get("reason") == t["reason"])
    lo, hi = float(t.get("min", 0)), float(t.get("max", math.inf))
    return {
        "name": f"rejections with reason {t['reason']} in [{lo:g}, {hi:g}]",
        "met": lo <= n <= hi,
        "detail": f"{n:.0f} (rejected_requests_total delta)",
    }


def _limit(t: Doc, r: Doc, _: Tenants) -> Doc:
    ph = _phase(r, t.get("phase"))
    seats = ph["seats"][t["level"]]
    nominal = r["server"]["levels"][t["level"]]["nominalSeats"]
    limit = seats["limit"]
    if t["check"] == "limitAboveNominal":
        met = limit > nominal + float(t.get("margin", 0.5))
        word = "borrows (limit above nominal)"
    else:
        met = limit <= nominal + float(t.get("tolerance", 0.5))
        word = "limit back at nominal or below"
    return {
        "name": f"{t['level']} {word} ({ph['name']})",
        "met": met,
        "detail": f"mean current limit {limit:.1f} seats, nominal {nominal:.0f}",
    }


def _nominal_changed(t: Doc, r: Doc, _: Tenants) -> Doc:
    a = _phase(r, t["before"])["seats"][t["level"]]["nominal"]
    b = _phase(r, t["after"])["seats"][t["level"]]["nominal"]
    return {
        "name": f"reload took effect ({t['level']} nominal seats changed)",
        "met": not math.isnan(a) and not math.isnan(b) and abs(a - b) >= 1,
        "detail": f"{a:.1f} -> {b:.1f} seats",
    }


def _restart(t: Doc, r: Doc, _: Tenants) -> Doc:
    rs = [e for e in r["events"] if e.get("action") == "restart"]
    ok = bool(rs) and all(
        e.get("readyzFlipSeconds") is not None and e.get("oldExitCode") == 0 for e in rs
    )
    detail = "; ".join(
        f"readyz flipped after {e.get('readyzFlipSeconds')}s, old gateway exited "
        f"{e.get('oldExitCode')} after {e.get('drainSeconds', 0):.1f}s"
        for e in rs
    )
    return {
        "name": "rolling restart: readiness flips, old gateway drains and exits 0",
        "met": ok,
        "detail": detail or "no restart happened",
    }


CHECKS: dict[str, Check] = {
    "jain": _jain,
    "noFailures": _no_failures,
    "noRejects": _no_rejects,
    "waitBound": _wait_bound,
    "p99Unchanged": _p99_unchanged,
    "rejectReason": _reject_reason,
    "limitAboveNominal": _limit,
    "limitAtMostNominal": _limit,
    "nominalChanged": _nominal_changed,
    "restart": _restart,
}


def evaluate(
    targets: list[dict[str, Any]], result: dict[str, Any], tenants: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out = []
    for t in targets:
        check = CHECKS.get(t.get("check", ""))
        if check is None:
            out.append({"name": str(t), "met": False, "detail": "unknown check"})
            continue
        try:
            out.append(check(t, result, tenants))
        except (KeyError, ValueError, TypeError) as exc:
            out.append({"name": t["check"], "met": False, "detail": f"not evaluable: {exc!r}"})
    return out
