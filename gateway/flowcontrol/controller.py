"""The APF controller: digests a configuration into priority levels, classifies requests and
starts them in their level's queue set.

Synchronous and single-threaded by design (see ``admission`` for the asyncio shell): every
method runs to completion without awaiting, so no locks are needed.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from gateway.clock import EventClock
from gateway.flowcontrol.borrowing import update_borrowing
from gateway.flowcontrol.classify import flow_schema_matches, matching_order
from gateway.flowcontrol.digest import RequestDigest, WorkEstimate
from gateway.flowcontrol.kinds import RequestKindTracker
from gateway.flowcontrol.level import PriorityLevel, object_uid, shares
from gateway.flowcontrol.objects import (
    MANDATORY_FS_CATCH_ALL,
    MANDATORY_FS_EXEMPT,
    DistinguisherMethod,
    FlowSchema,
    PriorityLevelConfiguration,
)
from gateway.flowcontrol.queueset import ESTIMATED_SERVICE_DURATION, NO_DEADLINE, Request
from gateway.flowcontrol.stats import FlowStats

DEFAULT_MAX_REQUESTS_INFLIGHT = 400
DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT = 200
CLASSIFICATION_CACHE_SIZE: Final = 65536


class ObjectSet(Protocol):
    """What the controller reads of a configuration (``configset.ConfigSet``)."""

    @property
    def flow_schemas(self) -> tuple[FlowSchema, ...]: ...

    @property
    def priority_levels(self) -> tuple[PriorityLevelConfiguration, ...]: ...


@dataclass(frozen=True, slots=True)
class SimpleObjectSet:
    flow_schemas: tuple[FlowSchema, ...] = ()
    priority_levels: tuple[PriorityLevelConfiguration, ...] = ()


@dataclass(slots=True)
class Classification:
    flow_schema: str
    fs_uid: str
    priority_level: str
    pl_uid: str
    exempt: bool
    distinguisher: str
    hash_value: int
    level: PriorityLevel
    flow_stats: FlowStats


def flow_hash(flow_schema: str, distinguisher: str) -> int:
    """First 8 bytes of SHA-256(schema NUL distinguisher), little-endian, as Kubernetes."""
    digest = hashlib.sha256(f"{flow_schema}\0{distinguisher}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def check_server_concurrency_limit(limit: int) -> None:
    if limit <= 0:
        raise ValueError("server concurrency limit must be positive")


class FlowController:
    """``config`` is a validated set of objects (``gateway.apfconfig`` builds one);
    ``mandatory`` holds Kubernetes' mandatory objects, "imagined" whenever ``config`` lacks
    them. The engine reads no files: callers hand both in."""

    def __init__(
        self,
        *,
        clock: EventClock,
        server_concurrency_limit: int = DEFAULT_MAX_REQUESTS_INFLIGHT
        + DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
        config: ObjectSet,
        mandatory: ObjectSet,
        estimated_service: float = ESTIMATED_SERVICE_DURATION,
    ) -> None:
        check_server_concurrency_limit(server_concurrency_limit)
        self.clock = clock
        # ``clock.now``, bound once: the release path reads it without attribute look-ups.
        self.now: Callable[[], float] = clock.now
        self.server_cl = server_concurrency_limit
        self.estimated_service = estimated_service
        self.levels: dict[str, PriorityLevel] = {}
        self.nominal_cl_sum = 0
        self.seat_fair_frac = 0.0
        self.flow_schemas: list[FlowSchema] = []
        self.dangling: list[tuple[str, str]] = []
        self.kinds = RequestKindTracker(clock)
        self._mandatory = mandatory
        self._cache: dict[tuple[Any, ...], Classification] = {}
        # Called after every computation of the levels' limits (once per re-digest).
        self.on_digest: list[Callable[[], None]] = []
        self.config: ObjectSet = SimpleObjectSet()  # the configuration last applied
        self.apply(config)

    # ------------------------------------------------------------------ configuration
    def apply(self, config: ObjectSet) -> None:
        """Swap in a new configuration; in-flight and queued requests are kept."""
        self._digest(config)
        self._set_limits()

    def reconfigure(self, config: ObjectSet, server_concurrency_limit: int) -> None:
        """A reload: the new configuration and concurrency limit, with the levels' limits
        computed once for both (``apply`` then ``set_server_concurrency_limit`` would compute
        them twice). Raises ``ValueError`` before changing anything."""
        check_server_concurrency_limit(server_concurrency_limit)
        self.server_cl = server_concurrency_limit
        self.apply(config)

    def _digest(self, config: ObjectSet) -> None:
        self.config = config
        mandatory = self._mandatory
        pls = {pl.name: pl for pl in config.priority_levels}
        for pl in mandatory.priority_levels:
            pls.setdefault(pl.name, pl)  # "imagined" when missing
        for name, pl_config in pls.items():
            level = self.levels.get(name)
            if level is None:
                level = self.levels[name] = PriorityLevel(
                    pl_config, self.clock, estimated_service=self.estimated_service
                )
                level.qs.on_idle = functools.partial(self._reap, level)
            else:
                level.set_config(pl_config)
        for name, level in list(self.levels.items()):
            if name not in pls:
                # Marked even when removed at once: a stale classification sees it.
                level.quiescing = True
                if level.qs.is_idle:
                    level.sync()
                    del self.levels[name]
        schemas = []
        self.dangling = []
        for fs in config.flow_schemas:
            target = fs.spec.priority_level_name
            if target in pls:
                schemas.append(fs)
            else:
                self.dangling.append((fs.name, target))
        names = {fs.name for fs in schemas}
        ordered = matching_order(schemas)
        for fs in mandatory.flow_schemas:
            if fs.name == MANDATORY_FS_EXEMPT and fs.name not in names:
                ordered.insert(0, fs)
            elif fs.name == MANDATORY_FS_CATCH_ALL and fs.name not in names:
                ordered.append(fs)
        self.flow_schemas = ordered
        for fs in ordered:  # each flow's statistics from zero: its metrics exist before use
            self.levels[fs.spec.priority_level_name].stats_for(fs.name)
        self._fs_uids = {
            fs.name: object_uid("FlowSchema", fs.name, fs.metadata.uid) for fs in ordered
        }
        self._cache.clear()

    def _set_limits(self) -> None:
        total = sum(shares(level.config) for level in self.levels.values())
        for level in self.levels.values():
            level.set_limits(self.server_cl, total)
        self.nominal_cl_sum = sum(level.nominal_cl for level in self.levels.values())
        self.update_borrowing()
        self.kinds.set_denominators(
            waiting=sum(
                max(1, lv.qs.queue_length_limit) * max(1, lv.qs.desired_num_queues)
                for lv in self.levels.values()
                if lv.qs.desired_num_queues > 0
            ),
            executing=sum(lv.nominal_cl for lv in self.levels.values()),
        )
        for hook in self.on_digest:
            hook()

    def update_borrowing(self) -> None:
        """One borrowing pass (after every re-digest and every adjustment period)."""
        self.seat_fair_frac = update_borrowing(list(self.levels.values()), self.nominal_cl_sum)

    def set_server_concurrency_limit(self, limit: int) -> None:
        check_server_concurrency_limit(limit)
        self.server_cl = limit
        self._set_limits()

    # ------------------------------------------------------------------ classification
    def classify(self, digest: RequestDigest) -> Classification:
        user = digest.user
        info = digest.info
        if info.is_resource_request:
            key: tuple[Any, ...] = (
                user.name,
                user.groups,
                info.verb,
                True,
                info.api_group,
                info.resource,
                info.subresource,
                info.namespace,
            )
        else:
            key = (user.name, user.groups, info.verb, False, info.path)
        found = self._cache.get(key)
        if found is not None:
            return found
        found = self._classify(digest)
        if len(self._cache) >= CLASSIFICATION_CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = found
        return found

    def _classify(self, digest: RequestDigest) -> Classification:
        chosen: FlowSchema | None = None
        catch_all: FlowSchema | None = None
        for fs in self.flow_schemas:
            if fs.name == MANDATORY_FS_CATCH_ALL:
                catch_all = fs
            if flow_schema_matches(fs, digest):
                chosen = fs
                break
        if chosen is None:
            if catch_all is None:
                raise RuntimeError("no catch-all FlowSchema; the configuration is broken")
            chosen = catch_all
        level = self.levels[chosen.spec.priority_level_name]
        distinguisher = ""
        hash_value = 0
        if level.uses_queues:
            method = chosen.spec.distinguisher_method
            if method is DistinguisherMethod.BY_USER:
                distinguisher = digest.user.name
            elif method is DistinguisherMethod.BY_NAMESPACE:
                distinguisher = digest.info.namespace
            hash_value = flow_hash(chosen.name, distinguisher)
        return Classification(
            flow_schema=chosen.name,
            fs_uid=self._fs_uids[chosen.name],
            priority_level=level.name,
            pl_uid=level.uid,
            exempt=level.exempt,
            distinguisher=distinguisher,
            hash_value=hash_value,
            level=level,
            flow_stats=level.stats_for(chosen.name),
        )

    # ------------------------------------------------------------------ requests
    def start(
        self,
        classification: Classification,
        work: WorkEstimate,
        *,
        wait_deadline: float | None = None,
        descr: Any = None,
        execution_timeout: float = NO_DEADLINE,
        on_expire: Callable[[Request], None] | None = None,
        owner: Any = None,
    ) -> Request:
        """Start a request in its classification's level: EXECUTING now, WAITING (set
        ``on_decided``), or REJECTED. Re-classifying a stale classification is the caller's
        job (``hold.try_start``): the caller must finish in the level it started in. The
        execution deadline: ``QueueSet.start_request``."""
        req = classification.level.qs.start_request(
            work,
            classification.hash_value,
            classification.flow_stats,
            classification.flow_schema,
            classification.distinguisher,
            descr,
            wait_deadline,
            execution_timeout,
            on_expire,
            owner,
        )
        return req

    def set_wait_deadline(self, classification: Classification, req: Request, when: float) -> None:
        classification.level.qs.set_wait_deadline(req, when)

    def cancel(
        self, classification: Classification, req: Request, reason: str = "cancelled"
    ) -> bool:
        return classification.level.qs.cancel(req, reason)

    def finish(self, classification: Classification, req: Request) -> None:
        level = classification.level
        if level.qs.finish(req):
            self._reap(level)

    def _reap(self, level: PriorityLevel) -> None:
        """Remove a quiescing level once idle, after a finish, a cancellation or a time-out."""
        if level.quiescing and level.qs.is_idle and self.levels.get(level.name) is level:
            level.sync()
            del self.levels[level.name]
            self._set_limits()

    def retry_after(self, priority_level: str) -> int:
        level = self.levels.get(priority_level)
        return level.drops.retry_after if level is not None else 1

    # ------------------------------------------------------------------ introspection
    def level_names(self) -> Iterable[str]:
        return sorted(self.levels)

    def max_seats(self, priority_level: str) -> int:
        """Per-level cap for work estimates (0: use the global limit)."""
        level = self.levels.get(priority_level)
        return level.max_seats if level is not None else 0

    def sync(self) -> None:
        for level in self.levels.values():
            level.sync()
        self.kinds.sync()
