"""Seat-seconds (Kubernetes' request/seat_seconds_test.go) and Go-style rounding."""

from __future__ import annotations

import pytest

from gateway.flowcontrol.seats import (
    SCALE,
    duration_per_seat,
    format_ss,
    round_half_up,
    seats_times_duration,
    to_float,
)


def test_one_unit() -> None:
    assert format_ss(1) == "0.00000001ss"
    assert to_float(1) == pytest.approx(1e-8, rel=0, abs=1e-20)


def test_seats_times_duration() -> None:
    ss = seats_times_duration(123, 0.1)
    assert ss == 1_230_000_000
    assert format_ss(ss) == "12.30000000ss"
    assert to_float(ss) == pytest.approx(12.3)


def test_format_pads_fraction() -> None:
    assert format_ss(0) == "0.00000000ss"
    assert format_ss(5 * SCALE + 7) == "5.00000007ss"
    assert format_ss(seats_times_duration(1, 0.003)) == "0.00300000ss"


@pytest.mark.parametrize(
    ("ss", "seats", "seconds"),
    [
        (seats_times_duration(10, 1.0), 1, 10.0),
        (seats_times_duration(1, 1.0), 10, 0.1),
        (seats_times_duration(13, 0.005), 5, 0.013),
    ],
)
def test_duration_per_seat(ss: int, seats: int, seconds: float) -> None:
    assert duration_per_seat(ss, seats) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),  # Python's round() gives 2
        (24.5, 25),  # node-high lendable: round(98 * 0.25); Python's round() gives 24
        (-0.5, -1),
        (-2.5, -3),
        (2.4999, 2),
        (-2.4999, -2),
        (0.0, 0),
    ],
)
def test_round_half_away_from_zero(x: float, expected: int) -> None:
    assert round_half_up(x) == expected


def test_seats_times_duration_rounds_half_away_from_zero() -> None:
    # 3 seats x 2.5 ns = 0.75 units -> 1; 1 seat x 5 ns = 0.5 units -> 1 (not 0)
    assert seats_times_duration(3, 2.5e-9) == 1
    assert seats_times_duration(1, 5e-9) == 1
    # the finish-time correction uses negative durations: symmetric rounding
    assert seats_times_duration(1, -5e-9) == -1
    assert seats_times_duration(2, -0.0015) == -300_000
