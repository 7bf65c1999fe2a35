"""The router's containers and their slots: choice, accounting, buffering, idle lifecycle.

Pure and synchronous: the invariant "never more than C concurrent /run per container" holds
because a slot is reserved by ``reserve`` (no await) before the shell sends anything, and
given back by ``release``. Waiting requests are granted in arrival order as slots free up.

Container choice (documented in docs/platform.md): among the action revision's containers
that are usable and have a free slot, prefer initialized running ones, then paused ones
(resume costs a signal), then uninitialized ones (they need /init); among running ones the
least in-flight, ties broken by the most recently used. Packing onto recently used
containers lets the others go idle, pause and be given back, like OpenWhisk's warm-first
scheduling; least-in-flight spreads load when C > 1 (Knative picks by concurrency too).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.clock import EventClock, Timer


class PoolEvents(Protocol):
    def pause(self, container: WarmContainer) -> None: ...
    def give_back(self, container: WarmContainer, reason: str) -> None: ...
    def drained(self, container: WarmContainer) -> None: ...


@dataclass(frozen=True, slots=True)
class PoolSettings:
    pause_grace: float = 10.0  # OpenWhisk: 10 s
    idle_timeout: float = 600.0  # OpenWhisk: 10 min


@dataclass(eq=False, slots=True)
class WarmContainer:
    id: str
    key: str  # action revision this container is initialized (or reserved) for
    url: str
    concurrency: int
    agent: dict[str, Any] = field(default_factory=dict)
    in_flight: int = 0
    initialized: bool = False
    initializing: bool = False
    paused: bool = False
    draining: bool = False
    last_used: float = 0.0
    runs: int = 0
    pause_timer: Timer | None = None
    idle_timer: Timer | None = None
    secret: str = field(default="", repr=False)  # sent on /init and /run (the runtime's)

    def free_slots(self) -> int:
        if self.draining or self.initializing:
            return 0
        if not self.initialized:
            return 1 if self.in_flight == 0 else 0
        return self.concurrency - self.in_flight


@dataclass(eq=False, slots=True)
class Slot:
    container: WarmContainer
    needs_init: bool
    needs_resume: bool
    released: bool = False


@dataclass(eq=False, slots=True)
class Waiter:
    key: str
    on_grant: Callable[[Slot], None]
    on_timeout: Callable[[], None]
    seq: int = 0
    timer: Timer | None = None
    done: bool = False


class RouterPool:
    def __init__(self, clock: EventClock, settings: PoolSettings, events: PoolEvents) -> None:
        self.clock = clock
        self.settings = settings
        self.events = events
        self.by_key: dict[str, dict[str, WarmContainer]] = {}
        self.by_id: dict[str, WarmContainer] = {}
        self.waiters: dict[str, deque[Waiter]] = {}
        self._seq = itertools.count()

    # ---- membership ----------------------------------------------------------------------
    def add(self, container: WarmContainer) -> None:
        if container.id in self.by_id:
            return
        container.last_used = self.clock.now()
        self.by_id[container.id] = container
        self.by_key.setdefault(container.key, {})[container.id] = container
        self._arm_idle(container)
        self._grant_waiters(container.key)

    def discard(self, cid: str) -> WarmContainer | None:
        """Stop routing to a container now (dead, timed out, given back); slots still release."""
        c = self.by_id.pop(cid, None)
        if c is None:
            return None
        c.draining = True
        self._cancel_timers(c)
        group = self.by_key.get(c.key)
        if group is not None:
            group.pop(cid, None)
            if not group:
                del self.by_key[c.key]
        return c

    def containers(self, key: str) -> list[WarmContainer]:
        return list(self.by_key.get(key, {}).values())

    # ---- slots ---------------------------------------------------------------------------
    def reserve(self, key: str) -> Slot | None:
        best: WarmContainer | None = None
        best_rank: tuple[float, ...] = ()
        for c in self.by_key.get(key, {}).values():
            if c.free_slots() <= 0:
                continue
            stage = 2 if not c.initialized else (1 if c.paused else 0)
            rank = (stage, c.in_flight, -c.last_used)
            if best is None or rank < best_rank:
                best, best_rank = c, rank
        if best is None:
            return None
        return self._take(best)

    def _take(self, c: WarmContainer) -> Slot:
        slot = Slot(c, needs_init=not c.initialized, needs_resume=c.paused)
        c.in_flight += 1
        c.runs += 1
        c.paused = False
        if not c.initialized:
            c.initializing = True
        self._cancel_timers(c)
        return slot

    def init_done(self, slot: Slot, ok: bool) -> None:
        c = slot.container
        c.initializing = False
        c.initialized = ok
        if ok:
            self._grant_waiters(c.key)

    def release(self, slot: Slot) -> None:
        if slot.released:
            return
        slot.released = True
        c = slot.container
        c.in_flight -= 1
        c.last_used = self.clock.now()
        if c.initializing and c.in_flight == 0:
            c.initializing = False  # the init never finished (cancelled): treat as cold again
        if c.draining:
            if c.in_flight == 0 and c.id not in self.by_id:
                self.events.drained(c)
            return
        if c.in_flight == 0:
            self._arm_idle(c)
        self._grant_waiters(c.key)

    # ---- buffering -----------------------------------------------------------------------
    def wait(
        self,
        key: str,
        timeout: float,
        on_grant: Callable[[Slot], None],
        on_timeout: Callable[[], None],
    ) -> Waiter:
        waiter = Waiter(key, on_grant, on_timeout, seq=next(self._seq))
        waiter.timer = self.clock.call_later(timeout, lambda: self._expire(waiter))
        self.waiters.setdefault(key, deque()).append(waiter)
        return waiter

    def cancel(self, waiter: Waiter) -> None:
        if not waiter.done:
            waiter.done = True
            if waiter.timer is not None:
                waiter.timer.cancel()
            queue = self.waiters.get(waiter.key)
            if queue is not None and waiter in queue:
                queue.remove(waiter)

    def waiting(self, key: str) -> int:
        return len(self.waiters.get(key, ()))

    def shortfall(self, key: str) -> int:
        """Waiting requests not covered by slots that are about to open (initializing)."""
        coming = sum(
            c.concurrency - 1
            for c in self.by_key.get(key, {}).values()
            if c.initializing and not c.draining
        )
        return max(0, self.waiting(key) - coming)

    def _expire(self, waiter: Waiter) -> None:
        if waiter.done:
            return
        self.cancel(waiter)
        waiter.on_timeout()

    def _grant_waiters(self, key: str) -> None:
        queue = self.waiters.get(key)
        while queue:
            slot = self.reserve(key)
            if slot is None:
                return
            waiter = queue.popleft()
            waiter.done = True
            if waiter.timer is not None:
                waiter.timer.cancel()
            waiter.on_grant(slot)
        if queue is not None and not queue:
            self.waiters.pop(key, None)

    # ---- give back -----------------------------------------------------------------------
    def give_back(self, cid: str, *, only_if_idle: bool, wait: bool) -> str:
        """Manager asks for a container: ``done``, ``busy`` (refused) or ``waiting``."""
        c = self.by_id.get(cid)
        if c is None:
            return "done"
        if c.in_flight and only_if_idle:
            return "busy"
        self.discard(cid)
        if c.in_flight and wait:
            return "waiting"
        return "done"

    # ---- idle lifecycle ------------------------------------------------------------------
    def _arm_idle(self, c: WarmContainer) -> None:
        self._cancel_timers(c)
        if c.initialized and c.agent.get("pause") and self.settings.pause_grace >= 0:
            c.pause_timer = self.clock.call_later(self.settings.pause_grace, lambda: self._pause(c))
        c.idle_timer = self.clock.call_later(self.settings.idle_timeout, lambda: self._idle(c))

    def _pause(self, c: WarmContainer) -> None:
        c.pause_timer = None
        if c.in_flight == 0 and not c.paused and c.id in self.by_id:
            c.paused = True
            self.events.pause(c)

    def _idle(self, c: WarmContainer) -> None:
        c.idle_timer = None
        if c.in_flight == 0 and self.discard(c.id) is not None:
            self.events.give_back(c, "idle")

    @staticmethod
    def _cancel_timers(c: WarmContainer) -> None:
        for timer in (c.pause_timer, c.idle_timer):
            if timer is not None:
                timer.cancel()
        c.pause_timer = c.idle_timer = None
