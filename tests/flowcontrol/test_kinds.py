"""Server-wide request kinds: time-weighted read/write ratios and last-second watermarks."""

from __future__ import annotations

import pytest

from gateway.flowcontrol.kinds import RequestKindTracker
from gateway.testing import FakeEventClock


def test_ratio_histograms_weight_each_state_by_its_duration() -> None:
    clock = FakeEventClock(start=100.0)
    kinds = RequestKindTracker(clock)
    kinds.set_denominators(waiting=100, executing=10)
    kinds.add("executing", True, 1)
    kinds.add("executing", True, 1)  # 2 read-only executing ...
    clock.advance(1.0)
    kinds.add("waiting", False, 1)  # ... then also 1 mutating waiting
    clock.advance(3.0)
    kinds.sync()
    ro = kinds.ratio["executing", "readOnly"]
    assert ro.count == pytest.approx(4.0)
    assert ro.sum == pytest.approx(0.2 * 4.0)
    mut_wait = kinds.ratio["waiting", "mutating"]
    assert mut_wait.sum == pytest.approx(0.01 * 3.0)
    assert dict(mut_wait.cumulative())[0.0] == pytest.approx(1.0)  # a second at zero


def test_watermark_reports_the_previous_seconds_maximum() -> None:
    clock = FakeEventClock(start=10.0)
    kinds = RequestKindTracker(clock)
    for _ in range(5):
        kinds.add("executing", False, 1)
    for _ in range(4):
        kinds.add("executing", False, -1)
    clock.advance(1.0)
    kinds.sync()
    assert kinds.watermark("executing", "mutating") == 5
    clock.advance(1.0)
    kinds.sync()
    assert kinds.watermark("executing", "mutating") == 1
    assert kinds.watermark("waiting", "readOnly") == 0


def test_an_unknown_phase_is_a_key_error() -> None:
    kinds = RequestKindTracker(FakeEventClock(start=1.0))
    with pytest.raises(KeyError):
        kinds.add("running", True, 1)
    kinds.add("waiting", False, 1)
    kinds.add("executing", False, 2)
    assert [m.current for m in kinds.marks.values()] == [0, 1, 0, 2]
