"""The max-min fair reference the reports compare measured seats with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.simulate.fairness import fair_alloc, fair_shares


def test_water_filling() -> None:
    assert fair_alloc([1, 100, 100], 51) == [1, 25, 25]
    assert fair_alloc([10, 20], 100) == [10, 20]
    assert fair_alloc([], 10) == []
    assert fair_alloc([5, 5], 0) == [0, 0]


@given(
    st.lists(st.floats(min_value=0, max_value=1e4), max_size=12),
    st.floats(min_value=0, max_value=1e5),
)
def test_max_min_properties(demands: list[float], capacity: float) -> None:
    alloc = fair_alloc(demands, capacity)
    assert all(0 <= a <= d + 1e-9 for a, d in zip(alloc, demands, strict=True))
    assert sum(alloc) == pytest.approx(min(capacity, sum(demands)), rel=1e-9, abs=1e-9)
    # Whoever is short of its demand gets at least as much as anyone else.
    top = max(alloc, default=0.0)
    for a, d in zip(alloc, demands, strict=True):
        if a < d - 1e-9:
            assert a == pytest.approx(top, rel=1e-9)


def test_clients_of_one_flow_split_its_share_by_demand() -> None:
    # Flow "x" has two clients (demands 30 and 10), flow "y" one (demand 100); capacity 40.
    shares = fair_shares([30, 10, 100], ["x", "x", "y"], 40)
    assert shares == pytest.approx([15, 5, 20])
