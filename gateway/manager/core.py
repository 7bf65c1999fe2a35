"""The manager's bookkeeping: routers and their leases, container ownership, quotas, eviction.

Pure and synchronous (no I/O, no awaits), driven by an injected event clock; the HTTP shell
(``gateway.manager.service``) performs what the returned plans ask for. Invariants:

- A container has at most one owner, a live router; only the owner routes to it.
- A container whose owner may still be using it (lease just expired, manager just restarted)
  is *quarantined* and assigned to nobody until the owner re-registers with it as a holding or
  the action's timeout has passed (any activation it was running has ended by then).
- The namespace quota counts every container of the namespace that is not being removed,
  including those still being created.
- A container drained while busy (``Never`` policy) is *draining*: never handed out again,
  removed as soon as it is known idle: its owner gives it back once its activation ended,
  the owner leaves gracefully, or (owner lost, or quarantined when drained) the action's
  timeout has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.clock import EventClock, Timer
from gateway.manager.model import ActionSpec, Container, CState
from gateway.manager.policy import Disruption, Reason, decide
from gateway.platform.ids import new_container_id

__all__ = [
    "ActionSpec",  # re-exported: the model lives in gateway.manager.model
    "CState",
    "Container",
    "Grant",
    "ManagerCore",
    "ManagerSettings",
    "RouterLease",
    "UnknownRouter",
]


class UnknownRouter(Exception):
    pass


@dataclass(slots=True)
class RouterLease:
    id: str
    url: str
    expires: float
    incarnation: str = ""  # the router process (random per start); "" if not told


@dataclass(slots=True)
class Grant:
    """The answer to an acquire: exactly one of the fields is meaningful (see ``kind``)."""

    assigned: list[Container] = field(default_factory=list)
    create: list[Container] = field(default_factory=list)
    proxy: list[RouterLease] = field(default_factory=list)
    evict: list[Container] = field(default_factory=list)
    reject: str | None = None
    limit: str = ""  # with ``reject``: which limit, "quota" or "instances"

    @property
    def kind(self) -> str:
        for name in ("reject", "assigned", "create", "proxy", "evict"):
            if getattr(self, name):
                return name
        return "empty"


@dataclass(frozen=True, slots=True)
class ManagerSettings:
    lease_seconds: float = 10.0
    default_quota: int = 100
    quota_overrides: dict[str, int] = field(default_factory=dict)
    unassigned_idle_seconds: float = 600.0  # unowned warm containers are removed after this
    quarantine_margin_seconds: float = 1.0

    def quota(self, namespace: str) -> int:
        return self.quota_overrides.get(namespace, self.default_quota)


class ManagerCore:
    def __init__(
        self,
        clock: EventClock,
        settings: ManagerSettings,
        on_reclaim: Callable[[Container], None],
        on_router_lost: Callable[[RouterLease, list[Container]], None] | None = None,
    ) -> None:
        self.clock = clock
        self.settings = settings
        self._on_reclaim = on_reclaim
        # a router's lease expired, or a new process took its id: (its lease, quarantined)
        self._on_router_lost = on_router_lost or (lambda lease, containers: None)
        self.routers: dict[str, RouterLease] = {}
        self.containers: dict[str, Container] = {}
        self._lease_timer: Timer | None = None

    # ---- routers -------------------------------------------------------------------------
    def register(
        self, router_id: str, url: str, holdings: Iterable[str] = (), incarnation: str = ""
    ) -> list[Container]:
        """A router (re)joins, offering the containers it holds.

        A router registers while its lease still runs when it is a new process under the same
        id (its predecessor died; a different ``incarnation``, or one not told): the
        predecessor's containers it does not hold may still be running the activations that
        died with it, so they are quarantined."""
        held = set(holdings)
        previous = self.routers.get(router_id)
        if previous is not None and (not incarnation or previous.incarnation != incarnation):
            lost = [
                old
                for old in self.containers.values()
                if old.owner == router_id and old.state is CState.ASSIGNED and old.id not in held
            ]
            for old in lost:
                self._quarantine(old, old.action.timeout_ms / 1000)
            self._orphan_draining(router_id)
            self._on_router_lost(previous, lost)
        expires = self.clock.now() + self.settings.lease_seconds
        self.routers[router_id] = RouterLease(router_id, url, expires, incarnation)
        for cid in held:
            c = self.containers.get(cid)
            if c is None or c.state in (CState.REMOVING, CState.DRAINING):
                continue
            if c.owner in (None, router_id) or c.owner not in self.routers:
                self._assign(c, router_id)
        self._arm_lease_check()
        return self.assignments(router_id)

    def renew(self, router_id: str) -> list[Container]:
        lease = self.routers.get(router_id)
        if lease is None:
            raise UnknownRouter(router_id)
        lease.expires = self.clock.now() + self.settings.lease_seconds
        return self.assignments(router_id)

    def deregister(self, router_id: str) -> None:
        """A router leaving gracefully has finished its work: its containers are free now."""
        if self.routers.pop(router_id, None) is None:
            raise UnknownRouter(router_id)
        for c in list(self.containers.values()):
            if c.owner == router_id and c.state is CState.ASSIGNED:
                self._unassign(c)
            elif c.owner == router_id and c.state is CState.DRAINING:
                self._drained(c)

    def assignments(self, router_id: str) -> list[Container]:
        return [
            c
            for c in self.containers.values()
            if c.owner == router_id and c.state in (CState.ASSIGNED, CState.CREATING)
        ]

    def _arm_lease_check(self) -> None:
        if self._lease_timer is None and self.routers:
            soonest = min(r.expires for r in self.routers.values())
            self._lease_timer = self.clock.call_at(soonest, self._check_leases)

    def _check_leases(self) -> None:
        self._lease_timer = None
        now = self.clock.now()
        for lease in [r for r in self.routers.values() if r.expires <= now]:
            del self.routers[lease.id]
            lost = [
                c
                for c in self.containers.values()
                if c.owner == lease.id and c.state is CState.ASSIGNED
            ]
            for c in lost:
                self._quarantine(c, c.action.timeout_ms / 1000)
            self._orphan_draining(lease.id)
            self._on_router_lost(lease, lost)
        self._arm_lease_check()

    # ---- containers ----------------------------------------------------------------------
    def acquire(
        self,
        router_id: str,
        action: ActionSpec,
        *,
        count: int = 1,
        known: Iterable[str] = (),
        allow_proxy: bool = True,
    ) -> Grant:
        if router_id not in self.routers:
            raise UnknownRouter(router_id)
        known_ids = set(known)
        live = [c for c in self.containers.values() if c.state is not CState.REMOVING]
        same = [c for c in live if c.action.key == action.key]
        mine = [c for c in same if c.owner == router_id and c.state is CState.ASSIGNED]
        news = [c for c in mine if c.id not in known_ids]
        if news:
            return Grant(assigned=news)
        spare = [c for c in same if c.state is CState.UNASSIGNED][:count]
        if spare:
            for c in spare:
                self._assign(c, router_id)
            return Grant(assigned=spare)
        mine_any = [c for c in same if c.owner == router_id]
        others = [c for c in same if c.state is CState.ASSIGNED and c.owner != router_id]
        if allow_proxy and not mine_any and others and len(same) < len(self.routers):
            owners = dict.fromkeys(c.owner for c in others if c.owner)
            return Grant(proxy=[self.routers[o] for o in owners if o in self.routers])
        action_count = sum(1 for c in live if c.action.path == action.path)
        instances_left = action.instances - action_count
        if instances_left <= 0:
            return Grant(
                reject=f"The action '{action.path}' has reached its instance limit "
                f"({action.instances} containers).",
                limit="instances",
            )
        quota = self.settings.quota(action.namespace)
        used = sum(1 for c in live if c.action.namespace == action.namespace)
        n = min(count, instances_left, quota - used)
        if n > 0:
            now = self.clock.now()
            made = [
                Container(new_container_id(), action, CState.CREATING, router_id, since=now)
                for _ in range(n)
            ]
            for c in made:
                self.containers[c.id] = c
            return Grant(create=made)
        candidates = self.space_candidates(action)
        if candidates:
            return Grant(evict=candidates)
        return Grant(
            reject=f"The namespace '{action.namespace}' has reached its quota of {quota} "
            "containers and none of its idle containers of other actions may be evicted "
            "(eviction.safe).",
            limit="quota",
        )

    def space_candidates(self, action: ActionSpec) -> list[Container]:
        """Idle-able containers of *other* actions of the namespace whose policy allows it."""
        found = [
            c
            for c in self.containers.values()
            if c.action.namespace == action.namespace
            and c.action.path != action.path
            and c.state in (CState.ASSIGNED, CState.UNASSIGNED)
            and decide(c.action.eviction, Reason.SPACE) is not Disruption.REFUSE
        ]
        found.sort(key=lambda c: (c.state is not CState.UNASSIGNED, c.since))
        return found

    def created(
        self, cid: str, url: str, agent: dict[str, Any], secret: str = ""
    ) -> Container | None:
        c = self.containers.get(cid)
        if c is None or c.state is not CState.CREATING:
            return None
        c.url, c.agent, c.secret = url, agent, secret
        if c.owner in self.routers:
            self._assign(c, c.owner)
        else:
            self._unassign(c)
        return c

    def adopt(
        self, cid: str, action: ActionSpec, url: str, agent: dict[str, Any], secret: str = ""
    ) -> Container:
        """A container found by the backend after a restart: quarantined until claimed."""
        c = Container(cid, action, CState.UNASSIGNED, url=url, agent=agent, secret=secret)
        self.containers[cid] = c
        self._quarantine(c, 2 * self.settings.lease_seconds)
        return c

    def begin_removal(self, cid: str) -> Container | None:
        c = self.containers.get(cid)
        if c is None or c.state is CState.REMOVING:
            return None
        self._cancel_timers(c)
        c.state, c.since = CState.REMOVING, self.clock.now()
        return c

    def restore(self, cid: str) -> Container | None:
        """A removal that did not happen (an eviction refused): warm and unowned again."""
        c = self.containers.get(cid)
        if c is None or c.state is not CState.REMOVING:
            return None
        self._unassign(c)
        return c

    def removed(self, cid: str) -> None:
        c = self.containers.pop(cid, None)
        if c is not None:
            self._cancel_timers(c)

    def begin_drain(self, cid: str, reason: str) -> Container | None:
        """A ``Never`` container drained while it may be busy: assigned (its owner gives it
        back once idle) or quarantined (removed when the quarantine ends)."""
        c = self.containers.get(cid)
        if c is None or c.state not in (CState.ASSIGNED, CState.QUARANTINED, CState.DRAINING):
            return None
        c.drain = c.drain or reason
        c.state = CState.DRAINING
        return c

    def disruption(self, cid: str, reason: Reason) -> Disruption:
        return decide(self.containers[cid].action.eviction, reason)

    def select(self, namespace: str | None = None, action: str | None = None) -> list[Container]:
        return [
            c
            for c in self.containers.values()
            if c.state in (CState.ASSIGNED, CState.UNASSIGNED, CState.QUARANTINED, CState.DRAINING)
            and (namespace is None or c.action.namespace == namespace)
            and (action is None or action in (c.action.path, c.action.name))
        ]

    # ---- state changes -------------------------------------------------------------------
    def _assign(self, c: Container, router_id: str) -> None:
        self._cancel_timers(c)
        c.owner, c.state, c.since = router_id, CState.ASSIGNED, self.clock.now()

    def _unassign(self, c: Container) -> None:
        self._cancel_timers(c)
        c.owner, c.state, c.since = None, CState.UNASSIGNED, self.clock.now()
        c.idle_timer = self.clock.call_later(
            self.settings.unassigned_idle_seconds, lambda: self._reclaim(c)
        )

    def _orphan_draining(self, router_id: str) -> None:
        """The draining containers of a router process that is gone: nobody will give them
        back, so they are removed once their activation's time limit has passed."""
        for c in self.containers.values():
            if c.owner == router_id and c.state is CState.DRAINING:
                c.owner = None
                self._cancel_timers(c)
                self._arm_quarantine(c, c.action.timeout_ms / 1000)

    def _quarantine(self, c: Container, seconds: float) -> None:
        self._cancel_timers(c)
        c.state, c.since = CState.QUARANTINED, self.clock.now()
        self._arm_quarantine(c, seconds)

    def _arm_quarantine(self, c: Container, seconds: float) -> None:
        delay = seconds + self.settings.quarantine_margin_seconds
        c.quarantine_timer = self.clock.call_later(delay, lambda: self._release(c))

    def _release(self, c: Container) -> None:
        c.quarantine_timer = None
        if c.state is CState.QUARANTINED:
            self._unassign(c)
        elif c.state is CState.DRAINING:
            self._drained(c)

    def _drained(self, c: Container) -> None:
        if self.begin_removal(c.id) is not None:
            self._on_reclaim(c)

    def _reclaim(self, c: Container) -> None:
        c.idle_timer = None
        if c.state is CState.UNASSIGNED and self.begin_removal(c.id) is not None:
            self._on_reclaim(c)

    @staticmethod
    def _cancel_timers(c: Container) -> None:
        for timer in (c.quarantine_timer, c.idle_timer):
            if timer is not None:
                timer.cancel()
        c.quarantine_timer = c.idle_timer = None
