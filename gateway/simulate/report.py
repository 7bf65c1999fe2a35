"""A simulation's results as JSON-ready data and as a human table (same numbers in both)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from typing import Any

from gateway.simulate.engine import REJECT_REASONS, ClientRun, LevelRun, SimulationResult
from gateway.simulate.fairness import fair_shares

DIGITS = 6


def _r(value: float) -> float:
    return round(value, DIGITS)


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None when there is nothing to rank."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def _flow_key(client: ClientRun) -> Hashable:
    c = client.classification
    if c.level.uses_queues:
        return (c.flow_schema, c.distinguisher)
    # One queue (FIFO) or Reject: all the level's clients are served first come, first served.
    return ""


def _limit_steps(run: LevelRun) -> list[tuple[float, int]]:
    """(from time, current limit) steps: the start-up limit, then each adjustment."""
    return [(0.0, run.initial_cl), *((s.time, s.current_cl) for s in run.limits)]


def fair_shares_of(result: SimulationResult) -> list[float]:
    """Each client copy's max-min fair share of its level's limit in seats, averaged over the
    run (aligned with ``result.clients``).

    The run is cut where anything changes (a client starts or stops, borrowing moves the limit);
    within each piece the limit is divided max-min fairly among the clients active then."""
    duration = result.traffic.duration
    by_level: dict[str, list[int]] = {}
    for i, client in enumerate(result.clients):
        by_level.setdefault(client.classification.priority_level, []).append(i)
    out = [0.0] * len(result.clients)
    for name, indexes in by_level.items():
        clients = [result.clients[i] for i in indexes]
        run = result.levels[name]
        if run.level.exempt:
            for i, c in zip(indexes, clients, strict=True):
                out[i] = c.demand_seat_seconds / duration
            continue
        steps = _limit_steps(run)
        cuts = {0.0, duration, *(t for t, _ in steps)}
        for c in clients:
            cuts.update(min(t, duration) for t in c.active)
        points = sorted(cuts)
        flows = [_flow_key(c) for c in clients]
        totals = [0.0] * len(clients)
        step = 0
        for begin, end in itertools.pairwise(points):
            while step + 1 < len(steps) and steps[step + 1][0] <= begin:
                step += 1
            demands = [
                c.demand if c.active[0] <= begin and end <= c.active[1] else 0.0 for c in clients
            ]
            shares = fair_shares(demands, flows, steps[step][1])
            for k, share in enumerate(shares):
                totals[k] += share * (end - begin)
        for i, total in zip(indexes, totals, strict=True):
            out[i] = total / duration
    return out


def client_json(copies: list[ClientRun], duration: float, fair_share: float) -> dict[str, Any]:
    """One client, its copies (``replicas``) added up; classification is the first copy's."""
    first = copies[0]
    spec, c = first.spec, first.classification
    waits = sorted(w for copy in copies for w in copy.waits)
    p50, p99 = percentile(waits, 0.5), percentile(waits, 0.99)
    rejected = dict.fromkeys(REJECT_REASONS, 0)
    for copy in copies:
        for reason, n in copy.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + n
    return {
        "flowSchema": c.flow_schema,
        "priorityLevel": c.priority_level,
        "distinguisher": c.distinguisher,
        "replicas": len(copies),
        "flows": len(
            {(x.classification.flow_schema, x.classification.distinguisher) for x in copies}
        ),
        "verb": first.digest.info.verb,
        "mode": "closed" if spec.closed_loop else "open",
        "seats": first.work.initial_seats,
        "finalSeats": first.work.final_seats,
        "additionalLatency": first.work.additional_latency,
        "calls": sum(x.calls for x in copies),
        "dispatched": sum(x.dispatched for x in copies),
        "rejected": rejected,
        "waitingAtEnd": sum(x.waiting for x in copies),
        "waitP50": None if p50 is None else _r(p50),
        "waitP99": None if p99 is None else _r(p99),
        "waitMax": _r(waits[-1]) if waits else None,
        "avgExecutingSeats": _r(sum(x.seat_seconds for x in copies) / duration),
        "demandSeats": _r(sum(x.demand_seat_seconds for x in copies) / duration),
        "fairShare": _r(fair_share),
    }


def level_json(run: LevelRun, clients: list[ClientRun], duration: float) -> dict[str, Any]:
    level = run.level
    rejected = dict.fromkeys(REJECT_REASONS, 0)
    for client in clients:
        for reason, n in client.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + n
    return {
        "type": run.kind,
        "nominalCL": level.nominal_cl,
        "lowerCL": level.min_cl,
        "upperCL": level.max_cl,
        "currentCL": level.current_cl or 0,
        "avgCL": _r(run.limit_seconds / duration),
        "maxSeats": level.max_seats,
        "clients": list(dict.fromkeys(c.spec.name for c in clients)),
        "dispatched": sum(c.dispatched for c in clients),
        "rejected": rejected,
        "avgExecutingSeats": _r(sum(c.seat_seconds for c in clients) / duration),
        "limits": [
            {
                "time": _r(s.time),
                "nominalCL": s.nominal_cl,
                "lowerCL": s.lower_cl,
                "upperCL": s.upper_cl,
                "currentCL": s.current_cl,
                "demandAvg": _r(s.demand_avg),
                "demandStdev": _r(s.demand_stdev),
                "demandHighWatermark": _r(s.demand_high_watermark),
                "smoothed": _r(s.smoothed),
                "target": _r(s.target),
            }
            for s in run.limits
        ],
    }


def to_json(result: SimulationResult) -> dict[str, Any]:
    duration = result.traffic.duration
    shares = fair_shares_of(result)
    copies: dict[str, list[ClientRun]] = {}
    share_sums: dict[str, float] = {}
    clients_by_level: dict[str, list[ClientRun]] = {name: [] for name in result.levels}
    for client, share in zip(result.clients, shares, strict=True):
        name = client.spec.name
        copies.setdefault(name, []).append(client)
        share_sums[name] = share_sums.get(name, 0.0) + share
        clients_by_level[client.classification.priority_level].append(client)
    return {
        "traffic": result.traffic.source,
        "duration": duration,
        "seed": result.seed,
        "serverConcurrencyLimit": result.server_concurrency_limit,
        "clients": {
            name: client_json(runs, duration, share_sums[name]) for name, runs in copies.items()
        },
        "levels": {
            name: level_json(run, clients_by_level[name], duration)
            for name, run in result.levels.items()
        },
    }


# ---------------------------------------------------------------------- text
def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join((first, *rest)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _rejected(rejected: dict[str, int]) -> str:
    return "/".join(str(rejected[r]) for r in REJECT_REASONS)


def render_text(data: dict[str, Any]) -> str:
    """The table for humans, rendered from ``to_json``'s data so both always agree."""
    out = [
        f"{data['traffic']}: {data['duration']:g}s of virtual time, seed {data['seed']}, "
        f"server concurrency limit {data['serverConcurrencyLimit']}",
        "",
    ]
    client_rows = [
        [
            name if c["replicas"] == 1 else f"{name} x{c['replicas']}",
            f"{c['flowSchema']} -> {c['priorityLevel']}",
            str(c["calls"]),
            str(c["dispatched"]),
            _rejected(c["rejected"]),
            _seconds(c["waitP50"]),
            _seconds(c["waitP99"]),
            f"{c['avgExecutingSeats']:.2f}",
            f"{c['fairShare']:.2f}",
            f"{c['demandSeats']:.2f}",
        ]
        for name, c in data["clients"].items()
    ]
    out += _table(
        (
            "CLIENT",
            "FLOWSCHEMA -> LEVEL",
            "CALLS",
            "DISPATCHED",
            "REJ qf/cl/to",
            "WAIT p50",
            "WAIT p99",
            "SEATS",
            "FAIR",
            "DEMAND",
        ),
        client_rows,
    )
    out.append("")
    level_rows = [
        [
            name,
            lv["type"],
            str(lv["nominalCL"]),
            f"{lv['lowerCL']}..{lv['upperCL']}",
            f"{lv['avgCL']:.1f}",
            str(lv["dispatched"]),
            _rejected(lv["rejected"]),
            f"{lv['avgExecutingSeats']:.2f}",
        ]
        for name, lv in data["levels"].items()
    ]
    out += _table(
        (
            "LEVEL",
            "TYPE",
            "NOMINAL",
            "BOUNDS",
            "AVG CL",
            "DISPATCHED",
            "REJ qf/cl/to",
            "SEATS",
        ),
        level_rows,
    )
    busy = [(n, lv) for n, lv in data["levels"].items() if lv["clients"] and lv["limits"]]
    if busy:
        out += ["", "current limit per adjustment period (time: currentCL/demand avg)"]
        for name, lv in busy:
            cells = " ".join(
                f"{s['time']:g}s:{s['currentCL']}/{s['demandAvg']:.1f}" for s in lv["limits"]
            )
            out.append(f"  {name}: {cells}")
    out += [
        "",
        "SEATS: time-averaged executing initial seats; FAIR: max-min fair share of the level's "
        "average limit; REJ: rejections by queue-full/concurrency-limit/time-out.",
    ]
    return "\n".join(out) + "\n"
