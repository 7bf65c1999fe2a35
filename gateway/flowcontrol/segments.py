"""Seconds spent in each joint state of four counts: the source of time-weighted statistics.

A queue set (and the server-wide kinds tracker) credits the time since its last change to the
state that held during it, on every start and finish; the histograms are folded from the
totals when read. Time-weighted histograms do not depend on the order of the segments, so one
total per distinct state is enough.

States repeat: a level under steady load moves between a handful of neighbouring states. Each
state is a ``Segment`` node holding its own seconds, and each node remembers the last state
reached from it upwards and downwards (by key). ``credit`` checks those two links first, so
the common change costs a few attribute reads and an int compare; a dict keyed by the packed
state is only the fallback. (A dict update per credit hashed and compared a fresh 60-bit int
key each time: about a fifth of compiled admission's cost.)

Keys: four counts in [0, 2**SEGMENT_BITS) pack into one non-negative int; any other state
(32768 or more of something at once, or a negative count from a bug) gets a negative id of its
own, kept for the life of the process so that an owner may hold on to a key. Tuples of the four
counts would be plainer but cost more compiled (kept: >= 1% of APF-on instructions,
docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

SEGMENT_BITS: Final = 15
SEGMENT_MASK: Final = (1 << SEGMENT_BITS) - 1
# Past this many distinct states the owner folds (``Segments.on_full``), forgetting them.
MAX_SEGMENTS: Final = 4096

State = tuple[int, int, int, int]


def pack(a: int, b: int, c: int, d: int) -> int:
    """The key of four counts that are all in [0, 2**SEGMENT_BITS)."""
    return a | b << SEGMENT_BITS | c << 2 * SEGMENT_BITS | d << 3 * SEGMENT_BITS


def unpack(key: int) -> State:
    return (
        key & SEGMENT_MASK,
        key >> SEGMENT_BITS & SEGMENT_MASK,
        key >> 2 * SEGMENT_BITS & SEGMENT_MASK,
        key >> 3 * SEGMENT_BITS,
    )


class Segment:
    """One state: its key, the seconds credited to it, and its last neighbours by key."""

    __slots__ = ("down", "key", "seconds", "up")

    def __init__(self, key: int) -> None:
        self.key = key
        self.seconds = 0.0
        self.up: Segment | None = None
        self.down: Segment | None = None


class Segments:
    """The states seen since the last fold, and the current one."""

    __slots__ = ("_by_key", "_wide", "_wide_states", "current", "on_full")

    def __init__(self) -> None:
        # Called when a new state makes ``MAX_SEGMENTS``: the owner folds (calls ``take``).
        self.on_full: Callable[[], None] | None = None
        self.current = Segment(0)
        self._by_key: dict[int, Segment] = {0: self.current}
        self._wide: dict[State, int] = {}
        self._wide_states: dict[int, State] = {}

    def key(self, a: int, b: int, c: int, d: int) -> int:
        if (a | b | c | d) >> SEGMENT_BITS == 0:
            return pack(a, b, c, d)
        state = (a, b, c, d)
        found = self._wide.get(state)
        if found is None:
            found = self._wide[state] = -1 - len(self._wide)
            self._wide_states[found] = state
        return found

    def state(self, key: int) -> State:
        return unpack(key) if key >= 0 else self._wide_states[key]

    def credit(self, key: int, dt: float) -> None:
        """``dt`` seconds spent in the state ``key``, which is now the current one."""
        seg = self.current
        if seg.key != key:
            near = seg.up if key > seg.key else seg.down
            if near is not None and near.key == key:
                self.current = seg = near
            else:
                seg = self.next(key)
        seg.seconds += dt

    def next(self, key: int) -> Segment:
        """Make ``key`` the current state, remembered as the old one's neighbour in its
        direction; returns its node."""
        cur = self.current
        seg = self._by_key.get(key)
        created = seg is None
        if seg is None:
            seg = self._by_key[key] = Segment(key)
        if key > cur.key:
            cur.up = seg
        else:
            cur.down = seg
        self.current = seg
        if created and len(self._by_key) >= MAX_SEGMENTS and self.on_full is not None:
            self.on_full()
        return seg

    def totals(self) -> dict[State, float]:
        """Seconds per state since the last ``take`` (states with none are left out)."""
        return {self.state(s.key): s.seconds for s in self._by_key.values() if s.seconds > 0}

    def take(self) -> list[tuple[State, float]]:
        """The totals, zeroed here; past ``MAX_SEGMENTS`` states all but the current one are
        forgotten (and the links to them), so memory stays bounded."""
        out = []
        for seg in self._by_key.values():
            if seg.seconds > 0:
                out.append((self.state(seg.key), seg.seconds))
                seg.seconds = 0.0
        if len(self._by_key) >= MAX_SEGMENTS:
            cur = self.current
            cur.up = cur.down = None
            self._by_key = {cur.key: cur}
        return out
