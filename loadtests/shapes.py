"""Load shapes: step, spike, and elephants arriving mid-run.

Each shape stops the test at the run's duration (``tick`` returns None). Tenants with a
``weight`` are the ones a shape scales; tenants with a fixed ``users`` count are always
spawned in full (Locust hands out ``fixed_count`` users first). Only the shape the scenario
names is exposed to Locust (see ``locustfiles/tenants.py``), because Locust refuses a
locustfile with several shape classes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from locust import LoadTestShape

from loadtests.common import RUN


def _fixed_users(classes: list[Any]) -> int:
    return sum(int(c.fixed_count) for c in classes)


def _users(classes: list[Any]) -> int:
    return sum(int(c.spec["users"]) for c in classes)


class _RunShape(LoadTestShape):
    abstract = True
    classes: ClassVar[list[Any]] = []  # set by the locustfile

    def __init__(self) -> None:
        super().__init__()
        self.params: dict[str, Any] = RUN.get("shape") or {}
        self.duration = float(RUN["duration"])

    def spawn_rate(self, users: int) -> float:
        """Fast both ways: Locust also stops users at this rate, and a spike that takes ten
        seconds to go away is not a spike."""
        return float(self.params.get("spawnRate", max(users, 200)))


class StepShape(_RunShape):
    """Scaled users grow by ``stepUsers`` every ``stepTime`` seconds up to ``maxUsers``."""

    abstract = True

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()
        if t >= self.duration:
            return None
        step = int(t // float(self.params.get("stepTime", 10)))
        scaled = min(
            int(self.params.get("stepUsers", 10)) * (step + 1),
            int(self.params.get("maxUsers", 100)),
        )
        users = _fixed_users(self.classes) + scaled
        return users, self.spawn_rate(users)


class SpikeShape(_RunShape):
    """``baseUsers`` scaled users, with ``spikeUsers`` more from ``at`` for ``length`` s."""

    abstract = True

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()
        if t >= self.duration:
            return None
        scaled = int(self.params.get("baseUsers", 0))
        at = float(self.params.get("at", 10))
        if at <= t < at + float(self.params.get("length", 3)):
            scaled += int(self.params.get("spikeUsers", 50))
        users = _fixed_users(self.classes) + scaled
        return users, self.spawn_rate(users)


class ElephantsArriveShape(_RunShape):
    """Everyone but the elephants from the start; elephants join at ``at`` seconds (and leave
    at ``leave`` if given), so the first stage is the unloaded baseline. A tenant's own
    ``start``/``stop`` (seconds) override this, for any kind."""

    abstract = True

    def active(self, spec: dict[str, Any], t: float) -> bool:
        elephant = spec.get("kind") == "elephant"
        start = float(spec.get("start", self.params.get("at", 10) if elephant else 0))
        default_stop = self.params.get("leave", self.duration + 1) if elephant else None
        stop = float(spec.get("stop", default_stop or self.duration + 1))
        return start <= t < stop

    def tick(self) -> tuple[int, float, list[Any]] | None:
        t = self.get_run_time()
        if t >= self.duration:
            return None
        classes = [c for c in self.classes if self.active(c.spec, t)]
        users = _users(classes)
        return users, self.spawn_rate(users), classes


SHAPES: dict[str, type[_RunShape]] = {
    "step": StepShape,
    "spike": SpikeShape,
    "elephants-arrive": ElephantsArriveShape,
}
