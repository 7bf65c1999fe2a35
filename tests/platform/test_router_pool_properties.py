"""Hypothesis: whatever happens (waits, cancels, give-backs, discards, time), no container
ever has more than C slots out, and in-flight counts equal the slots not yet released."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.router.pool import PoolSettings, RouterPool, Slot, Waiter, WarmContainer
from gateway.testing import FakeEventClock


class Events:
    def pause(self, container: WarmContainer) -> None:
        assert container.in_flight == 0

    def give_back(self, container: WarmContainer, reason: str) -> None:
        assert container.in_flight == 0

    def drained(self, container: WarmContainer) -> None:
        assert container.in_flight == 0


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "reserve", "wait", "release", "cancel", "discard", "give_back", "init", "tick"]
        ),
        st.integers(0, 1000),
    ),
    max_size=150,
)


@given(OPS, st.integers(1, 4))
@settings(max_examples=200, deadline=None)
def test_slots_never_exceed_concurrency(ops: list[tuple[str, int]], c: int) -> None:
    clock = FakeEventClock()
    pool = RouterPool(clock, PoolSettings(pause_grace=1, idle_timeout=5), Events())
    held: list[Slot] = []
    waiters: list[Waiter] = []
    every: dict[str, WarmContainer] = {}
    made = 0
    for op, n in ops:
        if op == "add":
            made += 1
            container = WarmContainer(
                f"c{made}", "k", "url", c, agent={"pause": True}, initialized=n % 2 == 0
            )
            every[container.id] = container
            pool.add(container)
        elif op == "reserve":
            slot = pool.reserve("k")
            if slot is not None:
                held.append(slot)
        elif op == "wait":
            waiters.append(pool.wait("k", n % 7 + 1, held.append, lambda: None))
        elif op == "release" and held:
            pool.release(held.pop(n % len(held)))
        elif op == "cancel" and waiters:
            pool.cancel(waiters.pop(n % len(waiters)))
        elif op == "discard" and every:
            pool.discard(sorted(every)[n % len(every)])
        elif op == "give_back" and every:
            pool.give_back(sorted(every)[n % len(every)], only_if_idle=n % 2 == 0, wait=True)
        elif op == "init":
            pending = [s for s in held if s.needs_init and s.container.initializing]
            if pending:
                pool.init_done(pending[n % len(pending)], ok=n % 3 != 0)
        elif op == "tick":
            clock.advance(n % 4)
        out = Counter(s.container.id for s in held if not s.released)
        for container in every.values():
            assert container.in_flight == out[container.id]
            limit = container.concurrency if container.initialized else 1
            assert container.in_flight <= limit
