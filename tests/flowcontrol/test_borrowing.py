"""Borrowing between priority levels: the allocation solver and scenarios in simulated time."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.flowcontrol.conc_alloc import AllocationError, AllocItem, compute_allocation
from tests.flowcontrol.borrow_harness import Harness, exempt_pl, limited_pl, user_fs
from tests.support.examples import examples

REL = 1e-9


def _check_solution(
    required: int, items: list[AllocItem], allocs: list[float], prop: float
) -> None:
    assert sum(allocs) == pytest.approx(required, rel=REL, abs=1e-6)
    for item, alloc in zip(items, allocs, strict=True):
        target = max(item.target, 0.001)
        assert item.lower - 1e-9 <= alloc <= item.upper + 1e-9
        fair = prop * target
        if fair <= item.lower:
            assert alloc == pytest.approx(item.lower, rel=REL, abs=1e-9)
        elif fair >= item.upper:
            assert alloc == pytest.approx(item.upper, rel=REL, abs=1e-9)
        else:
            assert alloc == pytest.approx(fair, rel=1e-6, abs=1e-9)


@st.composite
def problems(draw: st.DrawFn) -> tuple[int, list[AllocItem]]:
    n = draw(st.integers(1, 9))
    items = []
    for _ in range(n):
        lower = draw(st.integers(0, 100))
        target = lower + draw(st.integers(0, 100)) if draw(st.booleans()) else lower
        upper = lower + draw(st.integers(0, 300))
        items.append(AllocItem(float(lower), float(upper), float(target)))
    low = int(sum(i.lower for i in items))
    high = int(sum(i.upper for i in items))
    return draw(st.integers(low, high)), items


@settings(max_examples=examples(300), deadline=None)
@given(problems())
def test_allocation_sums_to_required_and_respects_bounds(
    problem: tuple[int, list[AllocItem]],
) -> None:
    required, items = problem
    allocs, prop = compute_allocation(required, items)
    _check_solution(required, items, allocs, prop)


def test_allocation_random_problems_like_kubernetes() -> None:
    rng = random.Random(1234567890)
    for _ in range(2000):
        n = rng.choice([0, 1, 2, 3, 4, 6, 9])
        items = []
        for _ in range(n):
            lower = rng.uniform(0, 50)
            target = lower + rng.uniform(0, 50) * rng.choice([0, 1])
            items.append(AllocItem(lower, lower + rng.uniform(0, 100), target))
        low = sum(i.lower for i in items)
        high = sum(i.upper for i in items)
        required = rng.randint(0, int(high * 1.2) + 2)
        feasible = low - required <= 1e-7 and required - high <= 1e-7
        if not feasible:
            with pytest.raises(AllocationError):
                compute_allocation(required, items)
            continue
        allocs, prop = compute_allocation(required, items)
        _check_solution(required, items, allocs, prop)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([AllocItem(-1, 2, 1)], "must not be negative"),
        ([AllocItem(2, 3, 1)], "below its lower bound"),
        ([AllocItem(2, 1, 2)], "below lower bound"),
    ],
)
def test_allocation_rejects_malformed_items(items: list[AllocItem], message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        compute_allocation(1, items)


def _two_levels(lend0: int, borrow0: int | None, lend1: int, borrow1: int | None) -> Harness:
    h = Harness(
        [limited_pl("pl0", 100, lend0, borrow0), limited_pl("pl1", 100, lend1, borrow1)],
        [user_fs("fs0", "u0", "pl0"), user_fs("fs1", "u1", "pl1")],
        24,
        measure_from=10.0,
    )
    for _ in range(24):
        h.thread("u0", service=0.25)
    for _ in range(6):
        h.thread("u1", service=0.25)
    h.run_until(25.0)
    return h


@pytest.mark.parametrize(
    ("lend0", "borrow0", "lend1", "borrow1"),
    [(50, 67, 33, 50), (50, 33, 67, 50)],
    ids=["lendable-limited", "borrowing-limited"],
)
def test_kubernetes_borrowing_scenario(lend0: int, borrow0: int, lend1: int, borrow1: int) -> None:
    # Kubernetes' TestBorrowing (which takes 25 s of real time), in simulated time.
    h = _two_levels(lend0, borrow0, lend1, borrow1)
    assert h.controller.levels["pl0"].nominal_cl == 12
    assert 15.5 <= h.average("pl0") <= 16.1
    assert 5.5 <= h.average("pl1") <= 6.1


def test_zero_lendable_never_lends() -> None:
    h = _two_levels(0, None, 0, None)
    assert h.average("pl0") == pytest.approx(12.0)
    assert all(s.current_cl == 12 for s in h.adjuster.history["pl1"])


def test_zero_borrowing_limit_never_borrows() -> None:
    h = _two_levels(50, 0, 100, None)
    assert h.average("pl0") == pytest.approx(12.0)
    assert max(s.current_cl for s in h.adjuster.history["pl0"]) == 12


def test_saturated_level_borrows_within_one_period_and_gives_back() -> None:
    h = Harness(
        [limited_pl("busy", 100, 0, None), limited_pl("idle", 100, 100, None)],
        [user_fs("fs-busy", "busy", "busy"), user_fs("fs-idle", "idle", "idle")],
        24,
    )
    for _ in range(24):
        h.thread("busy", service=0.25)
    # The lender wakes up at t=40 with 12 threads (its whole nominal share).
    for _ in range(12):
        h.thread("idle", service=0.25, start=40.0)
    h.run_until(10.0 + 1e-6)
    busy = h.controller.levels["busy"]
    assert busy.current_cl is not None and busy.current_cl > busy.nominal_cl
    h.run_until(80.0)
    history = {s.time: s for s in h.adjuster.history["idle"]}
    # Lender's demand returned at 40 s; by 60 s (two periods: the high watermark lags one) it
    # has its nominal share back and the borrower is back to its own.
    assert history[60.0].current_cl >= 12
    assert {s.time: s.current_cl for s in h.adjuster.history["busy"]}[60.0] <= 13


def test_exempt_demand_squeezes_limited_levels_to_their_lower_bounds() -> None:
    # Kubernetes' TestUpdateBorrowing step 1: exempt demand above the server limit.
    h = Harness(
        [exempt_pl(), limited_pl("high", 40, 50), limited_pl("low", 100, 90)],
        [user_fs("fs-exempt", "root", "exempt", 50), user_fs("fs-low", "low", "low")],
        145 * 6,
    )
    for _ in range(970):
        h.thread("root", service=0.5)
    h.run_until(20.0 + 1e-6)
    levels = h.controller.levels
    assert levels["exempt"].current_cl == 970
    for name in ("high", "low", "catch-all"):
        assert levels[name].current_cl == levels[name].min_cl
