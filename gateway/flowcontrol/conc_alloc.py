"""The fair allocation problem solved by the borrowing adjuster (Kubernetes ``conc_alloc.go``).

Find ``fair_prop`` so that ``alloc[i] = clamp(fair_prop * target[i], lower[i], upper[i])`` sums to
the required total. Bounds divided by targets are swept in ascending order; between two
consecutive bounds the sum grows linearly with the targets of the classes not clamped.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_TARGET = 0.001
EPSILON = 1e-7


class AllocationError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class AllocItem:
    lower: float
    upper: float
    target: float


def compute_allocation(required: int, items: list[AllocItem]) -> tuple[list[float], float]:
    """Returns (allocations, fair proportion); raises ``AllocationError`` when infeasible."""
    if required < 0:
        raise AllocationError("negative sums are not supported")
    low_sum = high_sum = target_sum = 0.0
    targets: list[float] = []
    rel_lower: list[float] = []
    rel_upper: list[float] = []
    for i, item in enumerate(items):
        if item.lower < 0:
            raise AllocationError(f"lower bound {i} is {item.lower} but must not be negative")
        if item.target < item.lower:
            raise AllocationError(
                f"target {i} is {item.target}, below its lower bound {item.lower}"
            )
        if item.upper < item.lower:
            raise AllocationError(
                f"upper bound {i} is {item.upper}, below lower bound {item.lower}"
            )
        target = max(item.target, MIN_TARGET)
        low_sum += item.lower
        high_sum += item.upper
        target_sum += target
        targets.append(target)
        rel_lower.append(item.lower / target)
        rel_upper.append(item.upper / target)
    if low_sum - required > EPSILON:
        raise AllocationError(f"lower bounds sum to {low_sum}, more than the required {required}")
    if required - high_sum > EPSILON:
        raise AllocationError(f"upper bounds sum to {high_sum}, less than the required {required}")
    if required == 0:
        return [0.0] * len(items), 0.0
    if low_sum - required > -EPSILON:
        return [item.lower for item in items], min(rel_lower)
    if required - high_sum > -EPSILON:
        return [item.upper for item in items], max(rel_upper)
    fair_prop = required / target_sum
    if max(rel_lower) <= fair_prop <= min(rel_upper):
        return [t * fair_prop for t in targets], fair_prop
    fair_prop = _sweep(required, low_sum, targets, rel_lower, rel_upper)
    allocs = [
        max(item.lower, min(item.upper, fair_prop * t))
        for item, t in zip(items, targets, strict=True)
    ]
    return allocs, fair_prop


def _sweep(
    required: float,
    low_sum: float,
    targets: list[float],
    rel_lower: list[float],
    rel_upper: list[float],
) -> float:
    # Each bound: (value, +target when the class starts growing, -target when it stops).
    bounds = sorted(
        [(b, t) for b, t in zip(rel_lower, targets, strict=True)]
        + [(b, -t) for b, t in zip(rel_upper, targets, strict=True)],
        key=lambda bt: bt[0],
    )
    fair_prop = min(rel_lower)
    sum_so_far = low_sum
    sensitive = 0.0  # sum of targets of classes between their bounds
    count = 0  # how many such classes
    pending = 0.0
    nxt = 0
    while sum_so_far < required:
        while True:
            sensitive += pending
            count += 1 if pending > 0 else -1 if pending < 0 else 0
            if nxt >= len(bounds):
                raise AllocationError("ran out of bounds in a bound-constrained problem")
            bound, pending = bounds[nxt]
            nxt += 1
            if bound > fair_prop:
                break
        if count == 0:
            fair_prop = bound
            continue
        candidate = fair_prop + (required - sum_so_far) / sensitive
        if candidate <= bound:
            return candidate
        sum_so_far += (bound - fair_prop) * sensitive
        fair_prop = bound
    return fair_prop
