"""The one last-second watermark (``gateway.flowcontrol.watermark``) that the request-kind
tracker and the max-in-flight filter share."""

from __future__ import annotations

from gateway.flowcontrol.watermark import Watermark


def test_reports_the_peak_of_the_second_that_just_closed() -> None:
    mark = Watermark(10)
    for _ in range(3):
        mark.add(1)
    mark.add(-2)
    mark.roll(10)  # same second: nothing closes
    assert (mark.current, mark.reported) == (1, 0)
    mark.roll(11)
    assert mark.reported == 3
    mark.add(1)
    mark.roll(12)
    assert mark.reported == 2  # the new window started at the count carried over (1), then 2


def test_an_idle_gap_reports_the_current_count() -> None:
    mark = Watermark(0)
    for _ in range(5):
        mark.add(1)
    mark.add(-4)
    mark.roll(3)  # seconds 1 and 2 saw no change: the last full second held only 1
    assert mark.reported == 1
    mark.roll(2)  # a clock reading from an earlier second changes nothing
    assert (mark.window, mark.reported) == (3, 1)
