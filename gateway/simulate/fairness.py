"""The max-min fair reference a client's measured seats are compared against.

Fair queuing shares a level's seats among flows (not clients): two clients that hash to the
same flow (same FlowSchema and distinguisher) share one queue. So the level's limit is divided
max-min fairly among flows, and a flow's share is split among its clients in proportion to
their demand, as a FIFO queue would.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def fair_alloc(demands: Sequence[float], capacity: float) -> list[float]:
    """Max-min fair allocation (water filling): nobody gets more than it asks for, and nobody
    can get more without taking from someone who has less."""
    alloc = [0.0] * len(demands)
    remaining = max(0.0, capacity)
    pending = sorted(range(len(demands)), key=lambda i: (demands[i], i))
    while pending:
        share = remaining / len(pending)
        first = pending[0]
        if demands[first] <= share:
            alloc[first] = max(0.0, demands[first])
            remaining -= alloc[first]
            pending.pop(0)
            continue
        for i in pending:
            alloc[i] = share
        break
    return alloc


def fair_shares(
    demands: Sequence[float], flows: Sequence[Hashable], capacity: float
) -> list[float]:
    """Per-client fair share of ``capacity`` when clients with equal ``flows`` share a queue."""
    order: list[Hashable] = []
    totals: dict[Hashable, float] = {}
    for demand, flow in zip(demands, flows, strict=True):
        if flow not in totals:
            order.append(flow)
            totals[flow] = 0.0
        totals[flow] += demand
    per_flow = dict(zip(order, fair_alloc([totals[f] for f in order], capacity), strict=True))
    return [
        per_flow[flow] * demand / totals[flow] if totals[flow] > 0 else 0.0
        for demand, flow in zip(demands, flows, strict=True)
    ]
