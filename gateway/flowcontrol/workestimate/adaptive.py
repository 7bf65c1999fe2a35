"""Adaptive seats: learn a route's cost from how long its requests take.

Seats are ``ceil(smoothed service time / seat_time)``, clamped to ``[minimum, maximum]``: a
route whose requests take four times ``seat_time`` holds four seats, so fairness is kept in
service time rather than in request counts. Use it when routes differ in cost but nobody has
measured by how much; prefer explicit rules when the cost is known.
"""

from __future__ import annotations

import math


class AdaptiveEstimator:
    def __init__(
        self,
        *,
        seat_time: float = 0.1,
        minimum: int = 1,
        maximum: int = 10,
        smoothing: float = 0.2,
        max_routes: int = 10_000,
    ) -> None:
        if seat_time <= 0 or not 0 < smoothing <= 1 or minimum < 1 or maximum < minimum:
            raise ValueError("adaptive estimator: invalid seat_time, smoothing or bounds")
        self.seat_time = seat_time
        self.minimum = minimum
        self.maximum = maximum
        self.smoothing = smoothing
        self.max_routes = max_routes
        self._ewma: dict[str, float] = {}

    def seats(self, route: str) -> int:
        ewma = self._ewma.get(route)
        if ewma is None:
            return self.minimum
        return max(self.minimum, min(self.maximum, math.ceil(ewma / self.seat_time - 1e-9)))

    def observe(self, route: str, service_time: float) -> None:
        ewma = self._ewma.get(route)
        if ewma is None:
            if len(self._ewma) >= self.max_routes:
                self._ewma.clear()
            self._ewma[route] = service_time
        else:
            self._ewma[route] = ewma + self.smoothing * (service_time - ewma)

    def known(self, route: str) -> float | None:
        return self._ewma.get(route)
