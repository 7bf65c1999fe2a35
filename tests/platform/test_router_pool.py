"""RouterPool in simulated time: the C invariant, choice, buffering, init, idle lifecycle."""

from __future__ import annotations

import random

from gateway.router.pool import PoolSettings, RouterPool, Slot, WarmContainer
from gateway.testing import FakeEventClock


class Events:
    def __init__(self) -> None:
        self.paused: list[str] = []
        self.given: list[tuple[str, str]] = []
        self.drained_ids: list[str] = []

    def pause(self, container: WarmContainer) -> None:
        self.paused.append(container.id)

    def give_back(self, container: WarmContainer, reason: str) -> None:
        self.given.append((container.id, reason))

    def drained(self, container: WarmContainer) -> None:
        self.drained_ids.append(container.id)


def make(**kw: float) -> tuple[RouterPool, FakeEventClock, Events]:
    clock = FakeEventClock()
    events = Events()
    pool = RouterPool(clock, PoolSettings(**kw), events)
    return pool, clock, events


def warm(cid: str, c: int = 1, key: str = "k", pause: bool = True) -> WarmContainer:
    return WarmContainer(cid, key, "url", c, agent={"pause": pause}, initialized=True)


def test_never_more_than_c_in_flight_under_random_traffic() -> None:
    rng = random.Random(7)
    for c in (1, 3):
        pool, _, _ = make()
        for i in range(3):
            pool.add(warm(f"c{i}", c))
        held: list[Slot] = []
        for _ in range(2000):
            if held and rng.random() < 0.5:
                pool.release(held.pop(rng.randrange(len(held))))
            else:
                slot = pool.reserve("k")
                if slot is not None:
                    held.append(slot)
            assert all(x.in_flight <= c for x in pool.by_id.values())
        assert len(held) <= 3 * c


def test_choice_prefers_running_then_least_loaded_then_recent() -> None:
    pool, clock, _ = make()
    a, b = warm("a", 2), warm("b", 2)
    pool.add(a)
    clock.advance(1)
    pool.add(b)
    first = pool.reserve("k")
    assert first is not None and first.container is b  # most recently used
    second = pool.reserve("k")
    assert second is not None and second.container is a  # least in flight
    b.paused = True
    pool.release(first)
    b.paused = True
    third = pool.reserve("k")
    assert third is not None and third.container is a  # running before paused


def test_waiters_are_granted_in_order_when_slots_free() -> None:
    pool, _, _ = make()
    pool.add(warm("a"))
    slot = pool.reserve("k")
    assert slot is not None
    got: list[int] = []
    pool.wait("k", 5, lambda s: got.append(1), lambda: got.append(-1))
    pool.wait("k", 5, lambda s: got.append(2), lambda: got.append(-2))
    assert pool.shortfall("k") == 2
    pool.release(slot)
    assert got == [1]


def test_waiter_times_out_on_the_clock() -> None:
    pool, clock, _ = make()
    out: list[str] = []
    pool.wait("k", 10, lambda s: out.append("grant"), lambda: out.append("timeout"))
    clock.advance(9.9)
    assert out == []
    clock.advance(0.1)
    assert out == ["timeout"]
    assert pool.waiting("k") == 0


def test_cold_container_inits_once_before_more_runs() -> None:
    pool, _, _ = make()
    c = WarmContainer("a", "k", "url", 3)
    pool.add(c)
    first = pool.reserve("k")
    assert first is not None and first.needs_init
    assert pool.reserve("k") is None  # others wait for the init
    got: list[Slot] = []
    pool.wait("k", 5, got.append, lambda: None)
    pool.init_done(first, ok=True)
    assert len(got) == 1 and not got[0].needs_init
    assert c.in_flight == 2


def test_pause_after_grace_resume_on_demand_give_back_after_idle() -> None:
    pool, clock, events = make(pause_grace=10, idle_timeout=600)
    pool.add(warm("a"))
    slot = pool.reserve("k")
    assert slot is not None
    clock.advance(30)
    assert events.paused == []  # busy containers are never paused
    pool.release(slot)
    clock.advance(9.9)
    assert events.paused == []
    clock.advance(0.1)
    assert events.paused == ["a"]
    again = pool.reserve("k")
    assert again is not None and again.needs_resume
    pool.release(again)
    clock.advance(599)
    assert events.given == []
    clock.advance(1)
    assert events.given == [("a", "idle")]
    assert pool.reserve("k") is None


def test_give_back_only_if_idle_and_wait_for_in_flight() -> None:
    pool, _, events = make()
    pool.add(warm("a"))
    pool.add(warm("b"))
    slot = pool.reserve("k")
    assert slot is not None
    busy = slot.container.id
    assert pool.give_back(busy, only_if_idle=True, wait=False) == "busy"
    assert pool.give_back(busy, only_if_idle=False, wait=True) == "waiting"
    assert all(c.id != busy for c in pool.containers("k"))
    pool.release(slot)
    assert events.drained_ids == [busy]
    other = "a" if busy == "b" else "b"
    assert pool.give_back(other, only_if_idle=True, wait=False) == "done"
    assert pool.containers("k") == []
