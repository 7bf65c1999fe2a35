"""One priority level: its limits, its queue set, its per-flow-schema statistics."""

from __future__ import annotations

import math
import uuid

from gateway.clock import EventClock
from gateway.flowcontrol.objects import (
    LimitResponseType,
    PriorityLevelConfiguration,
    PriorityLevelType,
)
from gateway.flowcontrol.queueset import QueueSet
from gateway.flowcontrol.retry_after import DroppedRequests
from gateway.flowcontrol.seats import round_half_up
from gateway.flowcontrol.stats import (
    DEMAND_SEATS_BUCKETS,
    REQUEST_UTILIZATION_BUCKETS,
    SEAT_UTILIZATION_BUCKETS,
    FlowStats,
    TimingHistogram,
)

UID_NAMESPACE = uuid.UUID("6f1a8d3e-5b0c-4c55-9a3e-8f0e2b7d4c11")


def object_uid(kind: str, name: str, uid: str) -> str:
    """The object's own UID, or a stable one derived from its name for objects from files."""
    return uid or str(uuid.uuid5(UID_NAMESPACE, f"{kind}/{name}"))


def shares(config: PriorityLevelConfiguration) -> int:
    spec = config.spec
    if spec.type is PriorityLevelType.EXEMPT:
        return spec.exempt.nominal_concurrency_shares if spec.exempt else 0
    assert spec.limited is not None
    return spec.limited.nominal_concurrency_shares


class PriorityLevel:
    def __init__(
        self, config: PriorityLevelConfiguration, clock: EventClock, *, estimated_service: float
    ) -> None:
        self.name = config.name
        self.config = config
        self.uid = object_uid("PriorityLevelConfiguration", config.name, config.metadata.uid)
        self.clock = clock
        self.quiescing = False
        self.flow_stats: dict[str, FlowStats] = {}
        self.drops = DroppedRequests()
        self.nominal_cl = 0
        self.lendable_cl = 0
        self.borrowing_cl = 0
        self.min_cl = 0
        self.max_cl = 0
        self.current_cl: int | None = None  # None until first digested
        self.max_seats = 0
        # Borrowing statistics (see gateway.flowcontrol.borrowing).
        self.high_watermark = 0
        self.demand_avg = 0.0
        self.demand_stdev = 0.0
        self.smoothed = 0.0
        self.target = 0.0
        # Time-weighted histograms, fed from the queue set's state segments.
        self.seat_utilization = TimingHistogram(SEAT_UTILIZATION_BUCKETS)
        self.request_utilization = {
            "waiting": TimingHistogram(REQUEST_UTILIZATION_BUCKETS),
            "executing": TimingHistogram(REQUEST_UTILIZATION_BUCKETS),
        }
        self.demand_seats = TimingHistogram(DEMAND_SEATS_BUCKETS)
        # Seats in use integrated over time (seat-seconds), in seats rather than as a fraction
        # of a limit that borrowing moves: Δ over Δ time is the mean seats in any window.
        self.seat_seconds = 0.0
        self.qs = QueueSet(
            self.name,
            clock,
            desired_num_queues=self._desired_queues(config),
            concurrency_limit=0,
            estimated_service=estimated_service,
            **self._queuing(config),
        )
        self.qs.on_segments_full = self.fold
        self.qs.on_reject = self._record_drop

    def _record_drop(self) -> None:
        self.drops.record(self.clock.now())

    # ------------------------------------------------------------------ config
    @property
    def exempt(self) -> bool:
        return self.config.spec.type is PriorityLevelType.EXEMPT

    @staticmethod
    def _desired_queues(config: PriorityLevelConfiguration) -> int:
        spec = config.spec
        if spec.type is PriorityLevelType.EXEMPT:
            return -1
        assert spec.limited is not None
        response = spec.limited.limit_response
        if response.type is LimitResponseType.REJECT or response.queuing is None:
            return 0
        return response.queuing.queues

    @staticmethod
    def _queuing(config: PriorityLevelConfiguration) -> dict[str, int]:
        limited = config.spec.limited
        if limited is None or limited.limit_response.queuing is None:
            return {}
        q = limited.limit_response.queuing
        return {"queue_length_limit": q.queue_length_limit, "hand_size": q.hand_size}

    @property
    def uses_queues(self) -> bool:
        """Whether requests get a flow distinguisher and hash (Queue with more than one queue)."""
        return self.qs.desired_num_queues > 1

    def set_config(self, config: PriorityLevelConfiguration) -> None:
        self.config = config
        self.uid = object_uid("PriorityLevelConfiguration", config.name, config.metadata.uid)
        self.quiescing = False

    def set_limits(self, server_cl: int, sum_shares: int) -> None:
        spec = self.config.spec
        self.nominal_cl = (
            math.ceil(server_cl * shares(self.config) / sum_shares) if sum_shares else 0
        )
        if spec.type is PriorityLevelType.EXEMPT:
            lendable_percent = spec.exempt.lendable_percent if spec.exempt else 0
            borrowing_percent: int | None = None
        else:
            assert spec.limited is not None
            lendable_percent = spec.limited.lendable_percent
            borrowing_percent = spec.limited.borrowing_limit_percent
        self.lendable_cl = round_half_up(self.nominal_cl * lendable_percent / 100)
        if borrowing_percent is None:
            self.borrowing_cl = server_cl
        else:
            self.borrowing_cl = round_half_up(self.nominal_cl * borrowing_percent / 100)
        self.min_cl = self.nominal_cl - self.lendable_cl
        self.max_cl = self.nominal_cl + self.borrowing_cl
        if self.current_cl is None:
            self.current_cl = self.nominal_cl - self.lendable_cl // 2
        desired = self._desired_queues(self.config)
        self.max_seats = 0
        if desired > 0:
            hand = self._queuing(self.config)["hand_size"]
            self.max_seats = max(1, min(math.ceil(0.15 * self.nominal_cl), self.nominal_cl // hand))
        self.server_cl = server_cl
        self.apply_current_limit()

    def apply_current_limit(self) -> None:
        current = self.current_cl or 0
        denominator = current if current > 0 else max(1, round_half_up(self.server_cl / 10))
        desired = self._desired_queues(self.config)
        qs = self.qs
        queuing = self._queuing(self.config)
        if (
            qs.concurrency_limit == current
            and qs.concurrency_denominator == denominator
            and qs.desired_num_queues == desired
            and qs.queue_length_limit == queuing.get("queue_length_limit", qs.queue_length_limit)
            and qs.hand_size == queuing.get("hand_size", qs.hand_size)
        ):
            return  # nothing changed: keep the queue set (and its statistics) as they are
        self.fold()
        self.qs.configure(
            desired_num_queues=desired,
            concurrency_limit=current,
            concurrency_denominator=denominator,
            **queuing,
        )

    # ------------------------------------------------------------------ statistics
    def stats_for(self, flow_schema: str) -> FlowStats:
        stats = self.flow_stats.get(flow_schema)
        if stats is None:
            stats = self.flow_stats[flow_schema] = FlowStats()
        return stats

    def fold(self) -> None:
        """Fold the queue set's state segments into the time-weighted statistics."""
        qs = self.qs
        segments = qs.segments.take()
        if not segments:
            return
        den = qs.concurrency_denominator
        wait_den = max(1, qs.queue_length_limit) * max(1, qs.desired_num_queues)
        seat_util = self.seat_utilization.hold
        waiting = self.request_utilization["waiting"].hold
        executing = self.request_utilization["executing"].hold
        demand_ratio = self.demand_seats.hold
        demand = qs.demand
        seat_seconds = 0.0
        for (seats_in_use, req_exec, req_wait, seats_wait), dt in segments:
            seat_seconds += seats_in_use * dt
            seat_util(seats_in_use / den, dt)
            waiting(req_wait / wait_den, dt)
            executing(req_exec / den, dt)
            seat_demand = seats_in_use + seats_wait
            demand_ratio(seat_demand / den, dt)
            demand.duration += dt
            demand.integral += seat_demand * dt
            demand.sq_integral += seat_demand * seat_demand * dt
        self.seat_seconds += seat_seconds

    def sync(self) -> None:
        """Bring time-weighted statistics up to now (before a scrape or an adjustment)."""
        self.qs.sync_time()
        self.fold()
