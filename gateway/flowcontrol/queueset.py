"""Fair queuing for one priority level, as Kubernetes' ``fairqueuing/queueset``.

Virtual time R advances, while the level is busy, at ``min(seats requested, limit) / active
queues`` seat-seconds per second. A queue's ``next_dispatch_r`` is the virtual time at which its
head may start; the head with the smallest ``next_dispatch_r + total_work`` goes first, ties
broken round-robin from just after the last queue served. If that head needs more seats than
are free nothing is dispatched ("no accommodation"), so wide requests are not starved.

Differences from the Go code, none of them observable in dispatch order:
- queues with waiting requests sit in a heap keyed by virtual finish time (stale entries are
  skipped), so choosing the next queue costs O(log queues) instead of a scan of every queue;
  ties are still broken by round-robin distance exactly as the scan would. An entry is
  ``(finish R, queue index)``, valid while it equals its queue's ``heap_key``; removing a
  queue renumbers the others, so it rebuilds the heap;
- cancelled requests are marked and skipped at the head instead of unlinked from a list;
- seat-second arithmetic uses Python integers, which do not wrap; the epoch advance still runs
  at the same threshold so long runs behave (and count) the same.

Besides queue waits, the queue set keeps its executing requests' deadlines (``requestTimeout``,
kube-apiserver's ``WithTimeoutForNonLongRunningRequests``, which sits outside APF in Go): a
request started with a finite ``execution_timeout`` is due ``arrival + timeout`` (queue wait
included), and one clock timer per queue set is armed at the earliest deadline of its executing
requests. A request that finishes first leaves nothing behind to cancel; the timer, when it
fires, scans the executing requests, calls ``on_expire`` of those past due and re-arms at the
next. Kept here rather than in the ASGI layer so admission adds no per-request bookkeeping
(decision 0032).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import deque
from collections.abc import Callable
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, Final

from mypy_extensions import mypyc_attr

from gateway.clock import EventClock, Timer
from gateway.flowcontrol.digest import WorkEstimate
from gateway.flowcontrol.seats import HIGH_R, R_DECREMENT, seats_times_duration
from gateway.flowcontrol.segments import Segments
from gateway.flowcontrol.shufflesharding import Dealer
from gateway.flowcontrol.stats import FlowStats, TimeIntegrator

ESTIMATED_SERVICE_DURATION = 0.003  # G, seconds

# Module constants on the hot path are Final: the compiled build then inlines them (or reads a
# C static) instead of looking them up in the module's globals on every use.
WAITING: Final = 0
EXECUTING: Final = 1
REJECTED: Final = 2
FINISHED: Final = 3  # main phase over (seats may still be held for the additional latency)
NO_DEADLINE: Final = math.inf

_entry_seq = itertools.count()


class Queue:
    __slots__ = (
        "executing",
        "heap_key",
        "index",
        "initial_seats_sum",
        "max_seats_sum",
        "n_waiting",
        "next_dispatch_r",
        "seats_in_use",
        "total_work_sum",
        "waiting",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.waiting: deque[Request] = deque()
        self.n_waiting = 0
        self.initial_seats_sum = 0
        self.max_seats_sum = 0
        self.total_work_sum = 0
        self.executing: set[Request] = set()
        self.seats_in_use = 0
        self.next_dispatch_r = 0
        # The key of this queue's live heap entry (None: none in the heap). Pushing the same
        # key again is skipped: the entry there is still right.
        self.heap_key: tuple[int, int] | None = None

    def head(self) -> Request | None:
        waiting = self.waiting
        while waiting:
            req = waiting[0]
            if req.state == WAITING:
                return req
            waiting.popleft()
        return None

    def is_empty(self) -> bool:
        return self.n_waiting == 0 and not self.executing


class Request:
    """One request's life in a queue set; ``on_decided`` fires when a wait ends,
    ``on_expire`` when it is still executing at its ``deadline`` (``owner``: the caller's, for
    ``on_expire``)."""

    __slots__ = (
        "additional_latency",
        "arrival_r",
        "arrival_time",
        "deadline",
        "descr",
        "distinguisher",
        "final_seats",
        "final_work",
        "flow_stats",
        "fs_name",
        "initial_seats",
        "max_seats",
        "on_decided",
        "on_expire",
        "owner",
        "queue",
        "reason",
        "start_time",
        "state",
        "total_work",
    )

    def __init__(
        self,
        work: WorkEstimate,
        fs_name: str,
        distinguisher: str,
        flow_stats: FlowStats,
        descr: Any,
        now: float,
        arrival_r: int,
        initial_work: int,
        deadline: float = NO_DEADLINE,
        on_expire: Callable[[Request], None] | None = None,
        owner: Any = None,
    ) -> None:
        self.initial_seats = work.initial_seats
        self.final_seats = work.final_seats
        self.additional_latency = work.additional_latency
        self.max_seats = work.max_seats
        final, latency = work.final_seats, work.additional_latency
        self.final_work = seats_times_duration(final, latency) if final and latency else 0
        self.total_work = initial_work + self.final_work
        self.fs_name = fs_name
        self.distinguisher = distinguisher
        self.flow_stats = flow_stats
        self.descr = descr
        self.arrival_time = now
        self.arrival_r = arrival_r
        self.start_time = 0.0
        self.state = WAITING
        self.reason = ""
        self.queue: Queue | None = None
        self.on_decided: Callable[[Request], None] | None = None
        self.deadline = deadline
        self.on_expire = on_expire
        self.owner = owner


# Tests subclass it (a reference scan dispatcher); the compiled build must allow that.
@mypyc_attr(allow_interpreted_subclasses=True)
class QueueSet:
    """``desired_num_queues``: -1 exempt (never limited), 0 reject when full, >= 1 queue."""

    # Dispatch an arrival directly when nothing waits (same effects; tests compare both ways;
    # kept: >= 1% of APF-on instructions, docs/performance.md).
    fast_dispatch = True

    def __init__(
        self,
        name: str,
        clock: EventClock,
        *,
        desired_num_queues: int,
        queue_length_limit: int = 0,
        hand_size: int = 0,
        concurrency_limit: int,
        concurrency_denominator: int | None = None,
        estimated_service: float = ESTIMATED_SERVICE_DURATION,
    ) -> None:
        self.name = name
        self.clock = clock
        # The bound reader: a read skips the look-ups on the clock object (a shortcut,
        # kept under 1% for the APF on/off target, docs/performance.md).
        self._now: Callable[[], float] = clock.now
        self.estimated_service = estimated_service
        self.estimated_service_ss = seats_times_duration(1, estimated_service)
        self.queues: list[Queue] = []
        self.desired_num_queues = 0
        self.queue_length_limit = 0
        self.hand_size = 0
        self.dealer: Dealer | None = None
        self.concurrency_limit = 0
        self.concurrency_denominator = 1
        self.current_r = 0
        self.last_real_time = clock.now()
        self.robin_index = 0
        self.enqueues = 0
        self.active_queues = 0
        self.tot_requests_waiting = 0
        self.tot_seats_waiting = 0
        self.tot_requests_executing = 0
        self.tot_seats_in_use = 0
        self.executing_sans_queue: set[Request] = set()
        self._heap: list[tuple[int, int]] = []  # (finish R, queue index)
        # Hands as tuples of shared index ints (one object per queue index, not per card):
        # a look-up then touches far fewer cache lines (ints above 256 are not cached).
        self._hands: dict[int, tuple[int, ...]] = {}
        self._cards: list[int] = []
        self._deadlines: list[tuple[float, int, Request]] = []
        self._deadline_timer: Timer | None = None
        self._deadline_at = 0.0
        # Executing requests' deadlines: one timer, at the earliest (NO_DEADLINE: none armed).
        self._execution_timer: Timer | None = None
        self.execution_timer_at = NO_DEADLINE
        # Debug counters (dump_priority_levels).
        self.dispatched = 0
        self.rejected = 0
        self.cancelled = 0
        # Observability: time spent in each state (seats in use, executing, waiting, seats
        # waiting) -> seconds, folded into timing histograms by ``gateway.flowcontrol.level``.
        # Summing per state keeps the hot path to one credit and the fold to the few distinct
        # states (time-weighted histograms do not depend on the order of segments).
        self.segments = Segments()
        self.segments.on_full = self._segments_full
        self.on_segments_full: Callable[[], None] | None = None
        # Called on every rejection (immediate or at the end of a wait): Retry-After history.
        self.on_reject: Callable[[], None] | None = None
        # Called when a cancellation or time-out leaves the level idle (reaping quiescing levels).
        self.on_idle: Callable[[], None] | None = None
        self.demand = TimeIntegrator()
        self.dispatch_r = 0
        self.latest_s = 0
        self.epoch_advances = {"true": 0, "false": 0}
        self.configure(
            desired_num_queues=desired_num_queues,
            queue_length_limit=queue_length_limit,
            hand_size=hand_size,
            concurrency_limit=concurrency_limit,
            concurrency_denominator=concurrency_denominator,
        )

    # ------------------------------------------------------------------ configuration
    def configure(
        self,
        *,
        desired_num_queues: int,
        queue_length_limit: int = 0,
        hand_size: int = 0,
        concurrency_limit: int,
        concurrency_denominator: int | None = None,
    ) -> None:
        self.sync_time()
        if self.on_segments_full is not None:
            self.on_segments_full()  # fold with the old limits before they change
        if desired_num_queues > 0:
            while len(self.queues) < desired_num_queues:
                self.queues.append(Queue(len(self.queues)))
            self.queue_length_limit = queue_length_limit
            self.hand_size = hand_size
            dealer = self.dealer
            if dealer is None or (dealer.deck_size, dealer.hand_size) != (
                desired_num_queues,
                hand_size,
            ):
                self.dealer = Dealer(desired_num_queues, hand_size)
                self._hands.clear()
                self._cards = list(range(desired_num_queues))
        # Queueless levels keep the old queue length limit and hand size so old queues drain.
        self.desired_num_queues = desired_num_queues
        self.concurrency_limit = concurrency_limit
        self.concurrency_denominator = (
            concurrency_denominator if concurrency_denominator else max(1, concurrency_limit)
        )
        self.dispatch_as_much_as_possible()

    # ------------------------------------------------------------------ time
    def sync_time(self) -> float:
        """Bring virtual time and the state segments up to the clock; returns its reading."""
        now = self._now()
        dt = now - self.last_real_time
        if dt > 0:
            self.last_real_time = now
            seats_in_use = self.tot_seats_in_use
            seats_waiting = self.tot_seats_waiting
            if self.active_queues:
                requested = seats_in_use + seats_waiting
                limit = self.concurrency_limit
                ratio = (requested if requested < limit else limit) / self.active_queues
                self.current_r += seats_times_duration(ratio, dt)
                if self.current_r >= HIGH_R:
                    self._advance_epoch()
            segments = self.segments
            key = segments.key(
                seats_in_use, self.tot_requests_executing, self.tot_requests_waiting, seats_waiting
            )
            segments.credit(key, dt)
        return now

    def _segments_full(self) -> None:
        if self.on_segments_full is not None:
            self.on_segments_full()

    def _advance_epoch(self) -> None:
        self.current_r -= R_DECREMENT
        success = True
        for queue in self.queues:
            if queue.is_empty():
                queue.next_dispatch_r = 0
                continue
            queue.next_dispatch_r -= R_DECREMENT
            if queue.next_dispatch_r < 0:
                success = False
            for req in queue.waiting:
                if req.state == WAITING:
                    req.arrival_r -= R_DECREMENT
                    if req.arrival_r < 0:
                        success = False
        self._rebuild_heap()
        self.epoch_advances["true" if success else "false"] += 1

    def _note_demand(self) -> None:
        demand = self.demand
        value = float(self.tot_seats_in_use + self.tot_seats_waiting)
        demand.value = value
        if value > demand.max:
            demand.max = value
        elif value < demand.min:
            demand.min = value

    # ------------------------------------------------------------------ arrival
    def start_request(
        self,
        work: WorkEstimate,
        hash_value: int,
        flow_stats: FlowStats,
        fs_name: str,
        distinguisher: str = "",
        descr: Any = None,
        wait_deadline: float | None = None,
        execution_timeout: float = NO_DEADLINE,
        on_expire: Callable[[Request], None] | None = None,
        owner: Any = None,
    ) -> Request:
        """Returns the request: EXECUTING, WAITING (set ``on_decided``) or REJECTED. A finite
        ``execution_timeout``: while executing ``execution_timeout`` after now (its arrival),
        ``on_expire(request)`` is called (once); the caller then ends it and calls ``finish``."""
        now = self.sync_time()
        req = Request(
            work,
            fs_name,
            distinguisher,
            flow_stats,
            descr,
            now,
            self.current_r,
            seats_times_duration(work.initial_seats, self.estimated_service),
            now + execution_timeout,
            on_expire,
            owner,
        )
        flow_stats.work_estimated_seats.observe(req.max_seats)
        if self.desired_num_queues < 1:
            if not self.can_accommodate(req.max_seats):
                self._reject_now(req, "concurrency-limit")
                return req
            req.start_time = now
            self._start_executing(req)
            self.executing_sans_queue.add(req)
            if self.desired_num_queues == 0:
                # Kubernetes observes the wait of every non-exempt request it runs, a Reject
                # level's at once too (``apf_filter.go``: ``queued`` is any non-exempt start).
                flow_stats.wait_seconds["true"].observe(0.0)
            return req
        queue = self.queues[self._shuffle_shard(hash_value)]
        req.queue = queue
        if (
            self.tot_seats_in_use >= self.concurrency_limit
            and queue.n_waiting >= self.queue_length_limit
        ):
            self._reject_now(req, "queue-full")
            return req
        if (
            self.fast_dispatch
            and not self.tot_requests_waiting
            and self.tot_seats_in_use < self.concurrency_limit
            and req.final_seats <= self.concurrency_limit
            and self.can_accommodate(req.max_seats)
        ):
            self._dispatch_at_once(queue, req)
            return req
        self._enqueue(queue, req)
        flow_stats.queue_length_after_enqueue.observe(queue.n_waiting)
        if queue.n_waiting == 1:
            # A new head. Behind an existing head neither the head nor next_dispatch_r
            # changes, so the queue's heap entry stays valid and pushing again would only
            # leave a stale entry behind (memory and pops per queued request).
            self._requeue(queue)
        self.dispatch_as_much_as_possible()
        if req.state == WAITING and wait_deadline is not None:
            self._add_deadline(wait_deadline, req)
        return req

    def _dispatch_at_once(self, queue: Queue, req: Request) -> None:
        """Enqueue then dispatch when nothing waits and the request fits: exactly the effects
        of ``_enqueue`` + ``_dispatch_one`` (the waiting sums go up and down again, the chosen
        queue is this one), without the FIFO and heap round trip."""
        if queue.is_empty():
            queue.next_dispatch_r = self.current_r
            self.active_queues += 1
        if queue.waiting:
            queue.waiting.clear()  # nothing waits: only cancelled leftovers
        stats = req.flow_stats
        stats.queue_length_after_enqueue.observe(1)
        queue.next_dispatch_r = max(queue.next_dispatch_r, req.arrival_r)
        now = self._start_from_queue(queue, req)
        stats.wait_seconds["true"].observe(now - req.arrival_time)
        if req.on_decided is not None:
            req.on_decided(req)

    def _reject_now(self, req: Request, reason: str) -> None:
        req.state = REJECTED
        req.reason = reason
        self.rejected += 1
        stats = req.flow_stats
        stats.rejected[reason] += 1
        stats.wait_seconds["false"].observe(0.0)
        if self.on_reject is not None:
            self.on_reject()

    def _shuffle_shard(self, hash_value: int) -> int:
        hand = self._hands.get(hash_value)
        if hand is None:
            assert self.dealer is not None
            cards = self._cards
            hand = tuple([cards[card] for card in self.dealer.deal(hash_value)])
            if len(self._hands) >= 131072:  # ~100k flows stay dealt (about 20 MB)
                self._hands.clear()
            self._hands[hash_value] = hand
        hand_size = len(hand)
        offset = self.enqueues % hand_size
        self.enqueues += 1
        if not self.tot_requests_waiting:
            # Every queue's waiting work is 0: the first visited wins (a shortcut, kept under 1%
            # compiled for the interpreted 5 us target, docs/performance.md).
            return hand[offset]
        queues = self.queues
        best = hand[offset]
        best_work = queues[best].total_work_sum
        for i in range(1, hand_size):
            idx = hand[(offset + i) % hand_size]
            work = queues[idx].total_work_sum
            if work < best_work:
                best, best_work = idx, work
        return best

    def _enqueue(self, queue: Queue, req: Request) -> None:
        if queue.is_empty():
            queue.next_dispatch_r = self.current_r
            self.active_queues += 1
        queue.waiting.append(req)
        queue.n_waiting += 1
        queue.initial_seats_sum += req.initial_seats
        queue.max_seats_sum += req.max_seats
        queue.total_work_sum += req.total_work
        self.tot_requests_waiting += 1
        self.tot_seats_waiting += req.max_seats
        stats = req.flow_stats
        stats.inqueue_requests += 1
        stats.inqueue_seats += req.max_seats
        self._note_demand()

    def _unqueue(self, queue: Queue, req: Request) -> None:
        """Bookkeeping of a request leaving the waiting list (dispatch or cancel)."""
        queue.n_waiting -= 1
        queue.initial_seats_sum -= req.initial_seats
        queue.max_seats_sum -= req.max_seats
        queue.total_work_sum -= req.total_work
        self.tot_requests_waiting -= 1
        self.tot_seats_waiting -= req.max_seats
        stats = req.flow_stats
        stats.inqueue_requests -= 1
        stats.inqueue_seats -= req.max_seats

    # ------------------------------------------------------------------ dispatch
    def _requeue(self, queue: Queue, replace: bool = False) -> None:
        """After a change at the queue's head or in its next dispatch R: anti-windup (the
        next dispatch R is never behind the head's arrival R), then the heap entry.
        ``replace``: the queue's live entry is the heap's top; swap it in one sift."""
        head = queue.head()
        if head is None:
            if replace:
                heappop(self._heap)
                queue.heap_key = None
            return
        r = queue.next_dispatch_r
        if r < head.arrival_r:
            r = queue.next_dispatch_r = head.arrival_r
        key = (r + head.total_work, queue.index)
        if key != queue.heap_key:
            queue.heap_key = key
            if replace:
                heapreplace(self._heap, key)
            else:
                heappush(self._heap, key)

    def _push(self, queue: Queue) -> None:
        head = queue.head()
        if head is None:
            return
        key = (queue.next_dispatch_r + head.total_work, queue.index)
        if key != queue.heap_key:
            queue.heap_key = key
            heappush(self._heap, key)

    def _rebuild_heap(self) -> None:
        self._heap.clear()
        for queue in self.queues:
            queue.heap_key = None
        for queue in self.queues:
            self._push(queue)

    def can_accommodate(self, seats: int) -> bool:
        if self.desired_num_queues < 0:
            return True
        if seats > self.concurrency_limit:
            return self.tot_requests_executing == 0
        return self.tot_seats_in_use + seats <= self.concurrency_limit

    def dispatch_as_much_as_possible(self) -> None:
        while (
            self.tot_requests_waiting
            and self.tot_seats_in_use < self.concurrency_limit
            and self._dispatch_one()
        ):
            pass

    def _pop_valid(self) -> tuple[int, int] | None:
        """Pop the smallest live entry (its queue's ``heap_key`` becomes None), or None."""
        heap, queues = self._heap, self.queues
        while heap:
            key = heappop(heap)
            queue = queues[key[1]]
            if key == queue.heap_key:
                queue.heap_key = None
                if queue.n_waiting:
                    return key
        return None

    def _repush(self, key: tuple[int, int]) -> None:
        """Put back a popped live entry (its queue's state has not changed since)."""
        self.queues[key[1]].heap_key = key
        heappush(self._heap, key)

    def _find_dispatch_queue(self) -> Queue | None:
        """The queue to dispatch from, or None. Without a tie its entry stays at the top of
        the heap (``heap_key`` set) for ``_dispatch_one`` to replace in one sift."""
        heap, queues = self._heap, self.queues
        while heap:
            first = heap[0]
            queue = queues[first[1]]
            if first == queue.heap_key:
                if queue.n_waiting:
                    break
                queue.heap_key = None
            heappop(heap)
        else:
            return None
        chosen = first
        # Entries with the same finish R as ``first`` are a tie. The second smallest entry is
        # one of the top's two children.
        finish_r = first[0]
        n = len(heap)
        if (n > 1 and heap[1][0] == finish_r) or (n > 2 and heap[2][0] == finish_r):
            heappop(heap)
            queue.heap_key = None
            ties = [first]
            while heap and heap[0][0] == finish_r:
                key = self._pop_valid()
                if key is None:
                    break
                if key[0] != finish_r:
                    self._repush(key)
                    break
                ties.append(key)
            if len(ties) > 1:
                nq = len(self.queues)
                start = self.robin_index + 1
                chosen = min(ties, key=lambda k: (k[1] - start) % nq)
                for key in ties:
                    if key != chosen:
                        self._repush(key)
                queue = queues[chosen[1]]
        head = queue.head()
        assert head is not None
        if not self.can_accommodate(head.max_seats):
            if queue.heap_key is None:
                self._repush(chosen)
            head.flow_stats.no_accommodation += 1
            return None
        return queue

    def _dispatch_one(self) -> bool:
        queue = self._find_dispatch_queue()
        if queue is None:
            return False
        req = queue.waiting.popleft()
        self._unqueue(queue, req)
        if req.final_seats > self.concurrency_limit:
            # Keep the work, spread over the seats that exist.
            req.final_seats = self.concurrency_limit
            req.additional_latency = (
                req.final_work / 1e8 / req.final_seats if req.final_seats > 0 else 0.0
            )
            # Seats are held (and later released) at the clipped width, as Kubernetes does.
            req.max_seats = max(req.initial_seats, req.final_seats, 1)
        now = self._start_from_queue(queue, req)
        # Without a tie, the queue's entry is still the heap's top (heap_key set).
        self._requeue(queue, replace=queue.heap_key is not None)
        req.flow_stats.wait_seconds["true"].observe(now - req.arrival_time)
        if req.on_decided is not None:
            req.on_decided(req)
        return True

    def _start_from_queue(self, queue: Queue, req: Request) -> float:
        """A request leaves its queue and starts: the dispatch bookkeeping shared by the
        general dispatch and the arrival fast path. Returns the start time."""
        self.robin_index = queue.index
        self.dispatch_r = self.current_r
        self.latest_s = queue.next_dispatch_r
        now = self.last_real_time
        req.start_time = now
        self._start_executing(req)
        queue.executing.add(req)
        queue.seats_in_use += req.max_seats
        queue.next_dispatch_r += req.total_work
        return now

    def _start_executing(self, req: Request) -> None:
        req.state = EXECUTING
        if req.deadline < self.execution_timer_at:
            self._arm_execution_timer(req.deadline)
        self.tot_requests_executing += 1
        self.tot_seats_in_use += req.max_seats
        self.dispatched += 1
        stats = req.flow_stats
        stats.dispatched += 1
        stats.executing_requests += 1
        stats.executing_seats += req.max_seats
        self._note_demand()

    # ------------------------------------------------------------------ wait deadlines
    def set_wait_deadline(self, req: Request, when: float) -> None:
        """Give a request that just queued its wait deadline (as ``start_request``'s
        ``wait_deadline``; set afterwards so requests that run at once never compute one)."""
        if req.state == WAITING:
            self._add_deadline(when, req)

    def _add_deadline(self, when: float, req: Request) -> None:
        """One clock timer per queue set, for the earliest deadline: a heap entry costs a
        request far less memory than a timer of its own."""
        deadlines = self._deadlines
        heappush(deadlines, (when, next(_entry_seq), req))
        if self._deadline_timer is None or when < self._deadline_at:
            self._arm_deadline_timer(when)
        elif len(deadlines) > 64 and len(deadlines) > 2 * self.tot_requests_waiting:
            # Dispatched requests leave their entries behind; drop them now and then.
            self._deadlines = [e for e in deadlines if e[2].state == WAITING]
            heapify(self._deadlines)

    def _arm_deadline_timer(self, when: float) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_at = when
        self._deadline_timer = self.clock.call_at(when, self._deadlines_due)

    def _deadlines_due(self) -> None:
        self._deadline_timer = None
        now = self.clock.now()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, _, req = heappop(deadlines)
            if req.state == WAITING:
                self.cancel(req, "time-out")
        while deadlines and deadlines[0][2].state != WAITING:
            heappop(deadlines)
        if deadlines:
            self._arm_deadline_timer(deadlines[0][0])

    # ------------------------------------------------------------------ execution deadlines
    def _arm_execution_timer(self, when: float) -> None:
        if self._execution_timer is not None:
            self._execution_timer.cancel()
        self.execution_timer_at = when
        self._execution_timer = self.clock.call_at(when, self._executions_due)

    def executing_requests(self) -> list[Request]:
        """Every request executing now (in a queue's or, queueless, in none)."""
        found = list(self.executing_sans_queue)
        for queue in self.queues:
            found.extend(queue.executing)
        return found

    def _executions_due(self) -> None:
        """The timer: expire the executing requests past their deadline (each once), re-arm
        at the earliest left. A scan, not a heap: requests that finish in time, nearly all,
        then cost nothing on the way out; this runs about once per timeout."""
        self._execution_timer = None
        self.execution_timer_at = NO_DEADLINE
        now = self.clock.now()
        upcoming = NO_DEADLINE
        due: list[Request] = []
        for req in self.executing_requests():
            deadline = req.deadline
            if deadline <= now:
                due.append(req)
            elif deadline < upcoming:
                upcoming = deadline
        for req in due:
            req.deadline = NO_DEADLINE
            if req.on_expire is not None:
                req.on_expire(req)
        if upcoming < self.execution_timer_at:
            self._arm_execution_timer(upcoming)

    # ------------------------------------------------------------------ cancellation

    def cancel(self, req: Request, reason: str = "time-out") -> bool:
        """End a wait without executing; False if the request is no longer waiting."""
        if req.state != WAITING:
            return False
        now = self.sync_time()
        queue = req.queue
        assert queue is not None
        req.state = REJECTED
        req.reason = reason
        self._unqueue(queue, req)
        if queue.is_empty():
            self.active_queues -= 1
        self.rejected += 1
        self.cancelled += 1
        stats = req.flow_stats
        stats.rejected[reason] += 1
        # As Kubernetes: a request that waited is observed with execute="true".
        stats.wait_seconds["true"].observe(now - req.arrival_time)
        self._note_demand()
        self._requeue(queue)
        if self.on_reject is not None:
            self.on_reject()
        if req.on_decided is not None:
            req.on_decided(req)
        if self.on_idle is not None and self.is_idle:
            self.on_idle()
        return True

    # ------------------------------------------------------------------ completion
    def finish(self, req: Request) -> bool:
        """The request's main phase is over; returns whether the level is now idle."""
        if req.state != EXECUTING:
            return self.is_idle
        now = self.sync_time()
        req.state = FINISHED
        self.tot_requests_executing -= 1
        stats = req.flow_stats
        stats.executing_requests -= 1
        queue = req.queue
        if queue is not None:
            queue.executing.discard(req)
            service = now - req.start_time
            queue.next_dispatch_r -= seats_times_duration(
                req.initial_seats, self.estimated_service - service
            )
            if queue.n_waiting:
                self._requeue(queue)
            elif not queue.executing:
                self.active_queues -= 1
        else:
            self.executing_sans_queue.discard(req)
        if req.additional_latency <= 0:
            self._release_seats(req)
        else:
            self.clock.call_later(
                req.additional_latency, functools.partial(self._release_later, req)
            )
        if self.tot_requests_waiting:
            self.dispatch_as_much_as_possible()
            return False
        return self.tot_requests_executing == 0

    def _release_later(self, req: Request) -> None:
        self.sync_time()
        self._release_seats(req)
        self.dispatch_as_much_as_possible()

    def _release_seats(self, req: Request) -> None:
        seats = req.max_seats
        self.tot_seats_in_use -= seats
        req.flow_stats.executing_seats -= seats
        self._note_demand()
        queue = req.queue
        if queue is None:
            return
        queue.seats_in_use -= seats
        # index < 0: already removed (an earlier late release of this queue emptied it);
        # removing "again" would delete whichever queue sits at that index.
        if queue.index >= 0 and len(self.queues) > self.desired_num_queues and queue.is_empty():
            self._remove_queue(queue)

    def _remove_queue(self, queue: Queue) -> None:
        index = queue.index
        del self.queues[index]
        queue.index = -1
        for q in self.queues[index:]:
            q.index -= 1
        if self.robin_index >= index:
            self.robin_index -= 1
        self._rebuild_heap()  # entries name queues by index

    # ------------------------------------------------------------------ introspection
    @property
    def is_idle(self) -> bool:
        return self.tot_requests_waiting == 0 and self.tot_requests_executing == 0

    def waiting_requests(self, queue: Queue) -> list[Request]:
        return [r for r in queue.waiting if r.state == WAITING]
