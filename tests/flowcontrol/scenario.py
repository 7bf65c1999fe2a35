"""Kubernetes' ``uniformScenario`` harness re-expressed in simulated time.

Each client has threads; each thread makes ``calls`` sequential calls that execute for
``exec_time`` and then think for ``think_time`` (measured from the start of execution, as in
Kubernetes: the next call is due ``exec + think`` after the previous one started). Each client's
executing initial seats are integrated over time and compared with the max-min fair share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.queueset import EXECUTING, REJECTED, QueueSet, Request
from gateway.flowcontrol.stats import FlowStats, TimeIntegrator
from gateway.testing import FakeEventClock


def fair_alloc(demands: list[float], capacity: float) -> list[float]:
    """Max-min fair allocation of ``capacity`` among ``demands``."""
    alloc = [0.0] * len(demands)
    remaining = capacity
    pending = sorted(range(len(demands)), key=lambda i: demands[i])
    while pending:
        share = remaining / len(pending)
        i = pending[0]
        if demands[i] <= share:
            alloc[i] = demands[i]
            remaining -= demands[i]
            pending.pop(0)
        else:
            for j in pending:
                alloc[j] = share
            break
    return alloc


@dataclass
class Client:
    hash_value: int
    threads: int
    calls: int
    exec_time: float
    think_time: float
    initial_seats: int = 1
    final_seats: int = 0
    pad: float = 0.0
    split: bool = False
    # results
    integrator: TimeIntegrator = field(default_factory=TimeIntegrator)
    executing_seats: int = 0
    executed: int = 0
    rejected: int = 0


class Scenario:
    def __init__(self, qs: QueueSet, clock: FakeEventClock, clients: list[Client]) -> None:
        self.qs = qs
        self.clock = clock
        self.clients = clients
        self.stats = [FlowStats() for _ in clients]
        self.last = clock.now()

    def _integrate(self) -> None:
        now = self.clock.now()
        dt = now - self.last
        for c in self.clients:
            c.integrator.hold(c.executing_seats, dt)
        self.last = now

    def run(self, eval_time: float) -> None:
        for ci, c in enumerate(self.clients):
            for t in range(c.threads):
                calls = c.calls
                start = 90e-9 * t + 20e-9 * ci
                if c.split and t >= c.threads // 2:
                    start += eval_time / 2
                    calls = c.calls // 2
                self.clock.call_at(start, self._caller(ci, calls))
        self.phases: list[tuple[list[float], list[float]]] = []
        if any(c.split for c in self.clients):
            self._eval(eval_time / 2, last=False)
        self._eval(eval_time, last=True)
        self.eval_averages = self.phases[-1][0]

    def _eval(self, when: float, *, last: bool) -> None:
        self.clock.run_until(when)
        self._integrate()
        averages = [c.integrator.reset()[1] for c in self.clients]
        demands = [
            (c.threads // 2 if c.split and not last else c.threads)
            * c.initial_seats
            * c.exec_time
            / (c.exec_time + c.think_time)
            for c in self.clients
        ]
        self.phases.append((averages, demands))

    def finish_all(self) -> None:
        """Run every remaining call to completion (Kubernetes runs the clock dry)."""
        self.clock.run_all()

    def _caller(self, ci: int, calls_left: int):  # type: ignore[no-untyped-def]
        def call() -> None:
            if calls_left <= 0:
                return
            c = self.clients[ci]
            self._integrate()
            work = WorkEstimate(c.initial_seats, c.final_seats, c.pad)
            req = self.qs.start_request(work, c.hash_value, self.stats[ci], f"client{ci}")
            if req.state == REJECTED:
                c.rejected += 1
                self.clock.call_later(c.exec_time + c.think_time, self._caller(ci, calls_left - 1))
                return
            if req.state == EXECUTING:
                self._executing(ci, req, calls_left)
            else:
                req.on_decided = lambda r: self._decided(ci, r, calls_left)

        return call

    def _decided(self, ci: int, req: Request, calls_left: int) -> None:
        if req.state == EXECUTING:
            self._executing(ci, req, calls_left)
        else:
            self.clients[ci].rejected += 1

    def _executing(self, ci: int, req: Request, calls_left: int) -> None:
        c = self.clients[ci]
        self._integrate()
        c.executing_seats += c.initial_seats
        c.executed += 1

        def done() -> None:
            self._integrate()
            c.executing_seats -= c.initial_seats
            self.qs.finish(req)

        self.clock.call_later(c.exec_time, done)
        self.clock.call_later(c.exec_time + c.think_time, self._caller(ci, calls_left - 1))

    def averages(self) -> list[float]:
        return self.eval_averages

    def expected_fair(self, concurrency_limit: int) -> list[float]:
        demands = [
            c.threads * c.initial_seats * c.exec_time / (c.exec_time + c.think_time)
            for c in self.clients
        ]
        return fair_alloc(demands, concurrency_limit)


def within(actual: float, expected: float, margin: float) -> bool:
    if expected == 0:
        return abs(actual) <= margin
    return abs(actual - expected) / expected <= margin


def make_qs(
    clock: FakeEventClock, queues: int, qll: int, hand: int, cl: int, name: str = "pl"
) -> QueueSet:
    return QueueSet(
        name,
        clock,
        desired_num_queues=queues,
        queue_length_limit=qll,
        hand_size=hand,
        concurrency_limit=cl,
    )
