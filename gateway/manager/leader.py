"""Leader election on a ``coordination.k8s.io/v1`` Lease, the client-go way, as a pure core.

- Every ``retry_period`` each candidate reads the Lease. If it is absent, or held by nobody,
  or its holder has not renewed it for ``lease_duration`` *as observed locally* (the time we
  last saw the record change, so clock skew between nodes does not matter), the candidate
  writes itself as holder; the write carries the resourceVersion it read, so of two racing
  candidates one gets 409 Conflict and stays a standby.
- The leader renews every ``retry_period``. If no renewal succeeds for ``renew_deadline``
  (< ``lease_duration``) it steps down, before any standby can consider the lease expired.
- On a graceful stop the leader releases the Lease (empty holder, 1 s duration), so a standby
  takes over within one retry period instead of a lease duration.

A standby takes over at most ``lease_duration + 2 * retry_period`` after the leader's last
renewal (it sees that renewal up to one period late, and checks once per period).

``LeaderElection`` does no I/O and reads time from an injected clock; ``election_step`` is
the thin async shell over a ``LeaseStore`` (``gateway.manager.backends.k8s.lease``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.clock import Clock

log = logging.getLogger("gateway.manager.leader")


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    lease_duration: float = 15.0  # client-go / kube-controller-manager defaults
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > retry_period > 0, "
                f"got {self.lease_duration}, {self.renew_deadline}, {self.retry_period}"
            )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str  # "" when released
    duration_seconds: int
    acquire_time: float | None  # wall-clock epoch seconds (informational)
    renew_time: float | None
    transitions: int = 0
    version: str | None = None  # metadata.resourceVersion as read


class Conflict(Exception):
    """The Lease changed since it was read (409), or already exists on create."""


class LeaseStore(Protocol):
    async def get(self) -> LeaseRecord | None: ...
    async def create(self, record: LeaseRecord) -> LeaseRecord: ...
    async def update(self, record: LeaseRecord) -> LeaseRecord: ...


class LeaderElection:
    def __init__(
        self,
        identity: str,
        config: ElectionConfig,
        clock: Clock,
        wall: Callable[[], float],
    ) -> None:
        self.identity = identity
        self.config = config
        self.clock = clock
        self.wall = wall
        self.is_leader = False
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._last_renew: float | None = None

    def plan(self, current: LeaseRecord | None) -> LeaseRecord | None:
        """The record to write given the one read (None: absent), or None to stay standby."""
        now = self.clock.now()
        if current != self._observed:
            self._observed, self._observed_at = current, now
        if current is None:
            return LeaseRecord(self.identity, self._duration(), self.wall(), self.wall(), 0)
        mine = current.holder == self.identity
        held = bool(current.holder) and not mine
        if held and now < self._observed_at + current.duration_seconds:
            if self.is_leader:
                self._step_down("another candidate holds the lease")
            return None
        wall = self.wall()
        return LeaseRecord(
            holder=self.identity,
            duration_seconds=self._duration(),
            acquire_time=current.acquire_time if mine else wall,
            renew_time=wall,
            transitions=current.transitions + (0 if mine else 1),
            version=current.version,
        )

    def succeeded(self, written: LeaseRecord) -> None:
        now = self.clock.now()
        self._observed, self._observed_at = written, now
        self._last_renew = now
        if not self.is_leader:
            log.info("%s became the leader", self.identity)
        self.is_leader = True

    def check_deadline(self) -> None:
        """Step down when no renewal succeeded for ``renew_deadline`` (call after each step)."""
        if not self.is_leader or self._last_renew is None:
            return
        if self.clock.now() - self._last_renew > self.config.renew_deadline:
            self._step_down(f"no renewal for {self.config.renew_deadline} s")

    def release(self) -> LeaseRecord | None:
        """The record that gives the lease up (only while leading)."""
        if not self.is_leader or self._observed is None:
            return None
        self.is_leader = False
        wall = self.wall()
        return dataclasses.replace(
            self._observed, holder="", duration_seconds=1, acquire_time=wall, renew_time=wall
        )

    def _duration(self) -> int:
        return max(1, round(self.config.lease_duration))

    def _step_down(self, why: str) -> None:
        log.warning("%s lost the leadership: %s", self.identity, why)
        self.is_leader = False


async def election_step(election: LeaderElection, store: LeaseStore) -> bool:
    """One try to acquire or renew; returns whether we lead afterwards. Never raises for
    API trouble (it counts as a failed renewal)."""
    try:
        current = await store.get()
        wanted = election.plan(current)
        if wanted is not None:
            write = store.create if current is None else store.update
            election.succeeded(await write(wanted))
    except Conflict:
        log.info("%s lost a race for the lease", election.identity)
    except Exception as exc:  # API unreachable, 5xx, ...: only the deadline decides
        log.warning("lease request failed: %s", exc)
    election.check_deadline()
    return election.is_leader


async def release(election: LeaderElection, store: LeaseStore) -> None:
    record = election.release()
    if record is not None:
        try:
            await store.update(record)
        except Exception as exc:
            log.warning("could not release the lease: %s", exc)
