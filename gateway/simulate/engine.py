"""Run traffic through the real flow controller in virtual time.

Every client's requests go through ``FlowController.classify`` and ``start`` exactly as the
front door's would; the only difference is the clock: a ``FakeEventClock`` jumps from event to
event, so a minute of traffic costs only as much CPU as the admission decisions themselves.

Client behaviour (documented for users in ``docs/simulate.md``):
- closed loop: each thread calls, waits for admission, executes ``serviceTime``, thinks
  ``thinkTime``, repeats; after a rejection it waits ``max(thinkTime, Retry-After)`` (the
  level's current advice, as a well-behaved client honours a 429) before its next call;
- open loop: arrivals at ``rate`` (Poisson or evenly spaced) regardless of how earlier calls fared.
A client with ``replicas: N`` runs as N independent copies (``{i}`` in its user, groups and path
becomes the copy's number), each a ``ClientRun``; reports add them up under the client's name.
Randomness comes from one ``random.Random`` per copy seeded from the run's seed, the client's
(unique) name and the copy number, so results depend on nothing but the inputs, and adding a
client leaves the others' arrival times alone.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.borrowing import BorrowingAdjuster, LimitsSnapshot
from gateway.flowcontrol.controller import Classification, FlowController, ObjectSet
from gateway.flowcontrol.digest import RequestDigest, WorkEstimate
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.objects import LimitResponseType, PriorityLevelType
from gateway.flowcontrol.queueset import EXECUTING, REJECTED, Request
from gateway.simulate.describe import digest_for, work_for
from gateway.simulate.traffic import ClientSpec, Traffic
from gateway.testing import FakeEventClock

REJECT_REASONS = ("queue-full", "concurrency-limit", "time-out")
# About a minute and a half of CPU at ~17 us per request; beyond that a typo is more likely.
MAX_REQUESTS = 5_000_000


def expected_calls(spec: ClientSpec) -> float:
    """Calls a client (all its copies) makes if it never waits; a closed loop calls at least
    once per thread."""
    window = spec.stop - spec.start
    if spec.closed_loop:
        per_thread = max(1.0, window / (spec.service_time + spec.think_time))
        if spec.calls is not None:
            per_thread = min(per_thread, spec.calls)
        per_copy = spec.threads * per_thread
    else:
        per_copy = spec.rate * window
    return spec.replicas * per_copy


class SimulationError(Exception):
    """The traffic cannot be simulated with this configuration (message names the client)."""


@dataclass(slots=True)
class ClientRun:
    spec: ClientSpec
    digest: RequestDigest
    classification: Classification
    work: WorkEstimate
    rng: random.Random
    calls: int = 0
    dispatched: int = 0
    rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))
    waits: list[float] = field(default_factory=list)
    seat_seconds: float = 0.0
    waiting: int = 0
    executing: int = 0

    @property
    def demand(self) -> float:
        """Seats this client keeps busy while active if it never waits."""
        spec = self.spec
        if spec.closed_loop:
            busy = spec.threads * spec.service_time / (spec.service_time + spec.think_time)
        else:
            busy = spec.rate * spec.service_time
        return self.work.initial_seats * busy

    @property
    def active(self) -> tuple[float, float]:
        """When the client asks for seats; a closed loop with ``calls`` stops once they are done."""
        spec = self.spec
        stop = spec.stop
        if spec.closed_loop and spec.calls is not None:
            stop = min(stop, spec.start + spec.calls * (spec.service_time + spec.think_time))
        return spec.start, stop

    @property
    def demand_seat_seconds(self) -> float:
        start, stop = self.active
        return self.demand * (stop - start)


@dataclass(slots=True)
class LevelRun:
    level: PriorityLevel
    initial_cl: int
    limits: list[LimitsSnapshot] = field(default_factory=list)
    limit_seconds: float = 0.0  # integral of the current limit over the run

    @property
    def kind(self) -> str:
        config = self.level.config.spec
        if config.type is PriorityLevelType.EXEMPT:
            return "Exempt"
        assert config.limited is not None
        if config.limited.limit_response.type is LimitResponseType.REJECT:
            return "Limited/Reject"
        return "Limited/Queue"


@dataclass(slots=True)
class SimulationResult:
    traffic: Traffic
    seed: int
    server_concurrency_limit: int
    clients: list[ClientRun]
    levels: dict[str, LevelRun]


class Simulation:
    def __init__(self, traffic: Traffic, config: ObjectSet, *, seed: int | None = None) -> None:
        self.traffic = traffic
        self.seed = traffic.seed if seed is None else seed
        self.clock = FakeEventClock(0.0)
        self.end = traffic.duration
        self.controller = FlowController(
            clock=self.clock,
            server_concurrency_limit=traffic.server_concurrency_limit,
            config=config,
            mandatory=bootstrap.mandatory(),
        )
        expected = sum(expected_calls(spec) for spec in traffic.clients)
        if expected > MAX_REQUESTS:
            raise SimulationError(
                f"the traffic asks for about {expected:,.0f} requests; the simulator stops at "
                f"{MAX_REQUESTS:,}: shorten the duration or lower rates, threads and replicas"
            )
        self.clients = [
            self._replica(spec, r) for spec in traffic.clients for r in range(spec.replicas)
        ]
        # The same periodic borrowing pass the gateway runs, on the virtual clock.
        self.adjuster = BorrowingAdjuster(self.controller, self.clock, keep_history=True)
        self.levels = {
            name: LevelRun(level, initial_cl=level.current_cl or 0)
            for name, level in sorted(self.controller.levels.items())
        }

    def _replica(self, spec: ClientSpec, replica: int) -> ClientRun:
        if spec.replicas > 1:
            number = str(replica)
            spec = replace(
                spec,
                user=spec.user.replace("{i}", number),
                groups=tuple(g.replace("{i}", number) for g in spec.groups),
                path=spec.path.replace("{i}", number),
            )
        digest = digest_for(spec)
        if digest.bypasses_flow_control:
            raise SimulationError(
                f'client "{spec.name}": {spec.path} is a long-running request (exec, attach, '
                "log, proxy, portforward); those bypass flow control, so there is nothing "
                "to simulate"
            )
        classification = self.controller.classify(digest)
        work = work_for(spec, self.controller.max_seats(classification.priority_level))
        rng = random.Random(f"{self.seed}/{spec.name}/{replica}")
        return ClientRun(spec, digest, classification, work, rng)

    # ------------------------------------------------------------------ running
    def run(self) -> SimulationResult:
        for client in self.clients:
            spec = client.spec
            if spec.closed_loop:
                for _ in range(spec.threads):
                    self.clock.call_at(spec.start, self._thread(client, spec.calls))
            else:
                first = spec.start + self._gap(client, first=True)
                if first < spec.stop:
                    self.clock.call_at(first, self._arrival(client))
        self.adjuster.start()
        self.clock.run_until(self.end)
        self.adjuster.stop()
        for name, run in self.levels.items():
            run.limits = self.adjuster.history.get(name, [])
            run.limit_seconds = _integrate_limit(run.initial_cl, run.limits, self.end)
        return SimulationResult(
            self.traffic,
            self.seed,
            self.traffic.server_concurrency_limit,
            self.clients,
            self.levels,
        )

    def _gap(self, client: ClientRun, *, first: bool = False) -> float:
        rate = client.spec.rate
        if client.spec.arrival == "uniform":
            return client.rng.random() / rate if first else 1.0 / rate
        return client.rng.expovariate(rate)

    def _arrival(self, client: ClientRun) -> Callable[[], None]:
        def arrive() -> None:
            self._call(client, None)
            following = self.clock.now() + self._gap(client)
            if following < client.spec.stop:
                self.clock.call_at(following, arrive)

        return arrive

    def _thread(self, client: ClientRun, calls_left: int | None) -> Callable[[], None]:
        def call() -> None:
            if calls_left == 0 or self.clock.now() >= client.spec.stop:
                return
            remaining = None if calls_left is None else calls_left - 1
            self._call(client, lambda rejected: self._next_call(client, remaining, rejected))

        return call

    def _next_call(self, client: ClientRun, calls_left: int | None, rejected: bool) -> None:
        pause = client.spec.think_time
        if rejected:
            pause = max(
                pause, float(self.controller.retry_after(client.classification.priority_level))
            )
        self.clock.call_later(pause, self._thread(client, calls_left))

    def _call(self, client: ClientRun, then: Callable[[bool], None] | None) -> None:
        """One request; ``then(rejected)`` runs when the caller is free again (closed loop)."""
        client.calls += 1
        arrival = self.clock.now()
        req = self.controller.start(
            client.classification,
            client.work,
            wait_deadline=arrival + client.spec.wait_limit,
            descr=client.digest,
        )
        if req.state == EXECUTING:
            self._execute(client, req, arrival, then)
        elif req.state == REJECTED:
            self._rejected(client, req, then)
        else:
            client.waiting += 1
            req.on_decided = lambda r: self._decided(client, r, arrival, then)

    def _decided(
        self, client: ClientRun, req: Request, arrival: float, then: Callable[[bool], None] | None
    ) -> None:
        # Runs inside the queue set's dispatch loop: only bookkeeping and scheduling here.
        client.waiting -= 1
        if req.state == EXECUTING:
            self._execute(client, req, arrival, then)
        else:
            self._rejected(client, req, then)

    def _rejected(
        self, client: ClientRun, req: Request, then: Callable[[bool], None] | None
    ) -> None:
        client.rejected[req.reason] = client.rejected.get(req.reason, 0) + 1
        if then is not None:
            then(True)

    def _execute(
        self, client: ClientRun, req: Request, arrival: float, then: Callable[[bool], None] | None
    ) -> None:
        now = self.clock.now()
        service = client.spec.service_time
        client.dispatched += 1
        client.executing += 1
        client.waits.append(now - arrival)
        client.seat_seconds += client.work.initial_seats * (min(now + service, self.end) - now)
        classification = client.classification

        def done() -> None:
            client.executing -= 1
            self.controller.finish(classification, req)
            if then is not None:
                then(False)

        self.clock.call_later(service, done)


def _integrate_limit(initial: int, limits: list[LimitsSnapshot], end: float) -> float:
    """Seat-seconds of limit over ``[0, end]``; each adjustment holds until the next."""
    total, held, since = 0.0, initial, 0.0
    for snapshot in limits:
        total += held * (snapshot.time - since)
        held, since = snapshot.current_cl, snapshot.time
    return total + held * (end - since)


def simulate(traffic: Traffic, config: ObjectSet, *, seed: int | None = None) -> SimulationResult:
    return Simulation(traffic, config, seed=seed).run()
