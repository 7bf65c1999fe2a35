"""The router's LRU map (``gateway.router.lru``): bounds by count and by size, least recently
used first out, each eviction named with the bound that caused it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.router.lru import Evicted, Lru
from tests.support.examples import examples


def test_the_least_recently_used_goes_first_and_a_read_counts_as_a_use() -> None:
    lru: Lru[str, int] = Lru(max_entries=2)
    assert lru.put("a", 1) == [] and lru.put("b", 2) == []
    assert lru.get("a") == 1  # "b" is now the least recently used
    assert lru.put("c", 3) == [Evicted("b", "entries")]
    assert list(lru) == ["a", "c"] and lru.get("b") is None


def test_the_size_bound_evicts_as_many_as_it_takes() -> None:
    lru: Lru[str, str] = Lru(max_entries=10, max_bytes=100)
    for key in "abc":
        assert lru.put(key, key, 30) == []
    assert lru.put("d", "d", 60) == [Evicted("a", "bytes"), Evicted("b", "bytes")]
    assert list(lru) == ["c", "d"] and lru.bytes == 90


def test_replacing_an_entry_counts_its_new_size_only() -> None:
    lru: Lru[str, str] = Lru(max_entries=10, max_bytes=90)
    lru.put("a", "x", 40)
    lru.put("b", "y", 40)
    assert lru.put("a", "z", 60) == [Evicted("b", "bytes")]
    assert lru.bytes == 60 and lru.get("a") == "z"


def test_an_entry_larger_than_the_size_bound_is_not_kept_and_drops_its_old_value() -> None:
    lru: Lru[str, str] = Lru(max_entries=10, max_bytes=100)
    lru.put("a", "small", 10)
    lru.put("b", "other", 10)
    assert lru.put("a", "huge", 101) == [Evicted("a", "bytes")]
    assert "a" not in lru and list(lru) == ["b"] and lru.bytes == 10


def test_pop_forgets_and_frees_the_size() -> None:
    lru: Lru[str, str] = Lru(max_entries=10, max_bytes=100)
    lru.put("a", "x", 70)
    assert lru.pop("a") == "x" and lru.pop("a") is None
    assert len(lru) == 0 and lru.bytes == 0
    assert lru.put("b", "y", 100) == []


@pytest.mark.parametrize(("entries", "size"), [(0, 1), (1, 0), (-1, None)])
def test_bounds_must_be_positive(entries: int, size: int | None) -> None:
    with pytest.raises(ValueError, match="positive"):
        Lru(entries, size)


OPS = st.lists(
    st.tuples(st.sampled_from(["put", "get", "pop"]), st.integers(0, 7), st.integers(0, 60)),
    max_size=100,
)


@given(OPS, st.integers(1, 5), st.integers(1, 120))
@settings(max_examples=examples(300), deadline=None)
def test_matches_a_list_model_within_both_bounds(
    ops: list[tuple[str, int, int]], max_entries: int, max_bytes: int
) -> None:
    """Against a plain list (oldest first): same keys in the same order, same evictions, and
    never more than either bound."""
    lru: Lru[int, int] = Lru(max_entries, max_bytes)
    model: list[tuple[int, int]] = []  # (key, size), least recently used first
    for op, key, size in ops:
        index = next((i for i, (k, _) in enumerate(model) if k == key), None)
        if op == "get":
            assert (lru.get(key) is not None) == (index is not None)
            if index is not None:
                model.append(model.pop(index))
        elif op == "pop":
            assert (lru.pop(key) is not None) == (index is not None)
            if index is not None:
                model.pop(index)
        else:
            if index is not None:
                model.pop(index)
            expected: list[Evicted[int]] = []
            if size > max_bytes:
                expected.append(Evicted(key, "bytes"))
            else:
                model.append((key, size))
                while len(model) > max_entries:
                    expected.append(Evicted(model.pop(0)[0], "entries"))
                while sum(s for _, s in model) > max_bytes:
                    expected.append(Evicted(model.pop(0)[0], "bytes"))
            assert lru.put(key, size, size) == expected
        assert list(lru) == [k for k, _ in model]
        assert lru.bytes == sum(s for _, s in model) <= max_bytes
        assert len(lru) <= max_entries
