"""Seat-seconds: the fixed-point unit of virtual time and work (scale 1e8, as Kubernetes).

Integers keep long runs exact. Go's ``math.Round`` rounds halves away from zero; Python's
``round`` does not, so ``round_half_up`` is used wherever Kubernetes rounds.
"""

from __future__ import annotations

import math
from typing import Final

SCALE: Final = 100_000_000  # units per seat-second
MAX_SEAT_SECONDS: Final = 2**64 - 1
# Epoch advance (overflow guard) thresholds from the queueset.
R_DECREMENT: Final = MAX_SEAT_SECONDS // 2
HIGH_R: Final = R_DECREMENT + R_DECREMENT // 2


def round_half_up(x: float) -> int:
    """Go's ``math.Round`` for any sign: halves away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def seats_times_duration(seats: float, duration: float) -> int:
    """Work of ``seats`` seats held for ``duration`` seconds, in seat-second units."""
    return round_half_up(seats * duration * SCALE)


def to_float(ss: int) -> float:
    return ss / SCALE


def duration_per_seat(ss: int, seats: float) -> float:
    return ss / SCALE / seats


def format_ss(ss: int) -> str:
    """Kubernetes' ``SeatSeconds.String()``: ``12.30000000ss``."""
    sign = "-" if ss < 0 else ""
    ss = abs(ss)
    return f"{sign}{ss // SCALE}.{ss % SCALE:08d}ss"
