"""Fairness arithmetic: max-min fair shares (water-filling), Jain's index, percentiles.

Demands and capacity are in seats (APF's unit): a closed-loop tenant with ``u`` users, ``s``
seats per request, execution time ``e`` and think time ``z`` demands ``u*s*e/(z+e)`` seats; a
constant-throughput tenant at ``r`` requests/s per user demands ``min(u*r*e, u)*s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def max_min_fair(demands: Sequence[float], capacity: float) -> list[float]:
    """Water-filling: flows wanting less than an equal split get their demand, the rest
    share what remains equally (APF's ``fairAlloc``)."""
    alloc = [0.0] * len(demands)
    remaining = max(0.0, capacity)
    order = sorted(range(len(demands)), key=lambda i: demands[i])
    left = len(order)
    for i in order:
        share = remaining / left if left else 0.0
        give = min(max(0.0, demands[i]), share)
        alloc[i] = give
        remaining -= give
        left -= 1
    return alloc


def jain(values: Sequence[float]) -> float:
    """(Σx)² / (n·Σx²): 1 when all equal, 1/n when one flow has everything."""
    xs = [v for v in values if not math.isnan(v)]
    if not xs:
        return math.nan
    sq = sum(x * x for x in xs)
    if sq == 0:
        return math.nan
    return sum(xs) ** 2 / (len(xs) * sq)


def closed_loop_demand(users: int, seats: int, exec_time: float, think: float) -> float:
    if exec_time <= 0:
        return float(users * seats)
    return users * seats * exec_time / (think + exec_time)


def rate_demand(users: int, seats: int, rate: float, exec_time: float) -> float:
    return min(users * rate * exec_time, float(users)) * seats


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
