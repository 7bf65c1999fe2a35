"""Dynamic ``Retry-After`` per priority level (kube-apiserver's dropped-requests tracker).

Like TCP congestion control: double the advice (up to 32 s) when at least three times its
value in requests were dropped during the last ``retryAfter`` seconds, otherwise creep down by
one second while fewer than ``retryAfter`` were dropped.
"""

from __future__ import annotations

import math

MAX_RETRY_AFTER = 32
INCREASE_FACTOR = 3


class DroppedRequests:
    __slots__ = ("history", "last_increase", "retry_after")

    def __init__(self) -> None:
        self.history: list[list[int]] = []  # [unix second, drops]
        self.retry_after = 1
        self.last_increase = 0

    def record(self, now: float) -> None:
        second = math.floor(now)
        history = self.history
        if history and history[-1][0] == second:
            history[-1][1] += 1
            return
        history.append([second, 1])
        self._update(second)
        keep = min(2 * self.retry_after, MAX_RETRY_AFTER)
        while history and second - history[0][0] > keep:
            history.pop(0)

    def _update(self, second: int) -> None:
        retry_after = self.retry_after
        dropped = 0
        for when, count in reversed(self.history):
            if second - when > retry_after:
                break
            if when < second:
                dropped += count
        if second - self.last_increase >= retry_after and dropped >= INCREASE_FACTOR * retry_after:
            self.retry_after = min(2 * retry_after, MAX_RETRY_AFTER)
            self.last_increase = second
        elif dropped < retry_after and retry_after > 1:
            self.retry_after = retry_after - 1
