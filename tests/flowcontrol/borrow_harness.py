"""Closed-loop clients driving a whole FlowController (with borrowing) in simulated time."""

from __future__ import annotations

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.borrowing import BorrowingAdjuster
from gateway.flowcontrol.controller import FlowController, SimpleObjectSet
from gateway.flowcontrol.digest import UNIT_WORK, RequestDigest, RequestInfo, UserInfo
from gateway.flowcontrol.objects import (
    ExemptPriorityLevelConfiguration,
    FlowSchema,
    ObjectMeta,
    PriorityLevelConfiguration,
    PriorityLevelConfigurationSpec,
    PriorityLevelType,
)
from gateway.flowcontrol.queueset import EXECUTING, WAITING, Request
from gateway.flowcontrol.stats import TimeIntegrator
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import flow_schema, queuing_level, rule, user


def limited_pl(
    name: str, shares: int = 100, lendable: int = 0, borrowing: int | None = None
) -> PriorityLevelConfiguration:
    return queuing_level(
        name, shares, queues=10, hand_size=2, queue_length_limit=10,
        lendable_percent=lendable, borrowing_limit_percent=borrowing,
    )  # fmt: skip


def exempt_pl(shares: int = 0, lendable: int = 0) -> PriorityLevelConfiguration:
    spec = ExemptPriorityLevelConfiguration(shares, lendable)
    return PriorityLevelConfiguration(
        ObjectMeta("exempt"), PriorityLevelConfigurationSpec(PriorityLevelType.EXEMPT, exempt=spec)
    )


def user_fs(name: str, user_name: str, level: str, precedence: int = 100) -> FlowSchema:
    return flow_schema(name, level, rule(user(user_name), resource_rules=()), precedence=precedence)


class Harness:
    def __init__(
        self,
        levels: list[PriorityLevelConfiguration],
        schemas: list[FlowSchema],
        server_limit: int,
        *,
        measure_from: float = 0.0,
    ) -> None:
        self.clock = FakeEventClock()
        self.controller = FlowController(
            clock=self.clock,
            server_concurrency_limit=server_limit,
            config=SimpleObjectSet(tuple(schemas), tuple(levels)),
            mandatory=bootstrap.mandatory(),
        )
        self.adjuster = BorrowingAdjuster(self.controller, self.clock, keep_history=True)
        self.adjuster.start()
        self.measure_from = measure_from
        self.executing: dict[str, int] = {}
        self.integrators: dict[str, TimeIntegrator] = {}
        self.last = 0.0

    def _integrate(self) -> None:
        now = self.clock.now()
        dt = now - self.last if now >= self.measure_from else 0.0
        for level, n in self.executing.items():
            self.integrators.setdefault(level, TimeIntegrator()).hold(n, dt)
        self.last = now

    def thread(self, user: str, *, service: float, start: float = 0.0, stop: float = 1e9) -> None:
        digest = RequestDigest(
            UserInfo(user, ("system:authenticated",)), RequestInfo(False, "/work", "get")
        )
        controller = self.controller
        clock = self.clock

        def call() -> None:
            if clock.now() >= stop:
                return
            cls = controller.classify(digest)
            req = controller.start(cls, UNIT_WORK, descr=digest)

            def run(r: Request) -> None:
                self._integrate()
                self.executing[cls.priority_level] = self.executing.get(cls.priority_level, 0) + 1

                def done() -> None:
                    self._integrate()
                    self.executing[cls.priority_level] -= 1
                    controller.finish(cls, r)
                    call()

                clock.call_later(service, done)

            if req.state == EXECUTING:
                run(req)
            elif req.state == WAITING:
                req.on_decided = lambda r: run(r) if r.state == EXECUTING else retry()
            else:
                retry()

        def retry() -> None:
            clock.call_later(0.01, call)

        clock.call_at(start, call)

    def run_until(self, when: float) -> None:
        self.clock.run_until(when)
        self._integrate()

    def average(self, level: str) -> float:
        integrator = self.integrators.get(level)
        return integrator.results()[1] if integrator else 0.0

    def reset_averages(self) -> None:
        self._integrate()
        for integrator in self.integrators.values():
            integrator.reset()
