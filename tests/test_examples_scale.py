"""The example budget of the property tests (tests/support/examples.py): full by default,
scaled down for the compiled re-run, never below 10."""

from __future__ import annotations

import pytest

from tests.support.examples import examples


def test_full_count_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APF_EXAMPLES_SCALE", raising=False)
    assert examples(400) == 400


def test_scaled_with_a_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APF_EXAMPLES_SCALE", "0.1")
    assert (examples(400), examples(50)) == (40, 10)
    monkeypatch.setenv("APF_EXAMPLES_SCALE", "10")
    assert examples(400) == 4000
