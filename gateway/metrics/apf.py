"""The APF metric set, read from the core's plain-Python statistics at scrape time.

Names, labels, buckets and HELP texts are Kubernetes' (``pkg/util/flowcontrol/metrics``), so
community APF dashboards work unchanged; HELP texts carry the stability prefix kube's metrics
framework adds (``[ALPHA]``, ``[BETA]``, ``[STABLE]``). The two deprecated gauges
(``request_concurrency_limit``, deprecated in 1.30, and ``request_concurrency_in_use``, 1.31)
are hidden, as in the Kubernetes release these metrics follow (``METRICS_KUBERNETES_VERSION``;
kube hides a metric from the release after its deprecation on), unless asked for
(``showHiddenMetricsForVersion``, kube-apiserver's ``--show-hidden-metrics-for-version``);
shown, their HELP says ``(Deprecated since ...)`` as kube's does. Time-weighted ("timing")
histograms count nanoseconds, as Kubernetes' ``TimingHistogram`` does: ``_count`` is the time
observed and ``_sum`` the value integrated over it, both in nanoseconds.

One series is the gateway's own (Kubernetes has no such counter):
``gateway_flowcontrol_priority_level_seat_seconds_total{priority_level}``, the executing seats
integrated over time, so that ``rate()`` of it is the mean seats busy over any window, however
short the requests (an instantaneous gauge sampled between them reads 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.flowcontrol.controller import FlowController
from gateway.flowcontrol.level import PriorityLevel
from gateway.flowcontrol.seats import SCALE
from gateway.flowcontrol.stats import Histogram
from gateway.metrics.frontdoor import histogram_buckets

P = "apiserver_flowcontrol_"
PL_FS = ["priority_level", "flow_schema"]
NS = 1e9
# The Kubernetes release whose metric set (stability, hidden metrics) this follows.
METRICS_KUBERNETES_VERSION = "1.34"
# Stability levels other than ALPHA (the default), by family name (counters without _total).
STABILITY = {
    P + "rejected_requests": "BETA",
    P + "dispatched_requests": "BETA",
    P + "current_inqueue_requests": "BETA",
    P + "current_executing_requests": "BETA",
    P + "current_executing_seats": "BETA",
    P + "request_wait_duration_seconds": "BETA",
    P + "nominal_limit_seats": "BETA",
    "apiserver_current_inflight_requests": "STABLE",
}
# Deprecated metrics hidden in METRICS_KUBERNETES_VERSION, with the version that deprecated them.
HIDDEN = {
    P + "request_concurrency_limit": "1.30.0",
    P + "request_concurrency_in_use": "1.31.0",
}


def _timing(h: Histogram) -> tuple[list[tuple[str, float]], float]:
    return [(le, c * NS) for le, c in histogram_buckets(h)], h.sum * NS


class APFMetrics(Collector):
    def __init__(self, controller: FlowController, *, show_hidden: bool = False) -> None:
        self.controller = controller
        self.show_hidden = show_hidden

    def collect(self) -> Iterator[Metric]:
        for family in self._families():
            deprecated = HIDDEN.get(family.name)
            if deprecated is not None:
                if not self.show_hidden:
                    continue
                family.documentation = f"(Deprecated since {deprecated}) {family.documentation}"
            stability = STABILITY.get(family.name, "ALPHA")
            family.documentation = f"[{stability}] {family.documentation}"
            yield family

    def _families(self) -> Iterator[Metric]:
        c = self.controller
        c.sync()
        levels = sorted(c.levels.items())
        yield from self._per_flow(levels)
        yield from self._per_level(levels)
        kinds = c.kinds
        rw = HistogramMetricFamily(
            P + "read_vs_write_current_requests",
            "Observations, at the end of every nanosecond, of the number of requests (as a "
            "fraction of the relevant limit) waiting or in regular stage of execution",
            labels=["phase", "request_kind"],
        )
        for (phase, kind), h in sorted(kinds.ratio.items()):
            buckets, total = _timing(h)
            rw.add_metric([phase, kind], buckets, total)
        yield rw
        for name, phase, text in (
            ("apiserver_current_inflight_requests", "executing",
             "Maximal number of currently used inflight request limit of this apiserver per "
             "request kind in last second."),
            ("apiserver_current_inqueue_requests", "waiting",
             "Maximal number of queued requests in this apiserver per request kind in last "
             "second."),
        ):  # fmt: skip
            g = GaugeMetricFamily(name, text, labels=["request_kind"])
            for kind in ("mutating", "readOnly"):
                g.add_metric([kind], kinds.watermark(phase, kind))
            yield g
        yield GaugeMetricFamily(
            P + "seat_fair_frac",
            "Fair fraction of server's concurrency to allocate to each priority level that can "
            "use it",
            value=getattr(c, "seat_fair_frac", 0.0),
        )

    def _per_flow(self, levels: list[tuple[str, PriorityLevel]]) -> Iterator[Metric]:
        f: dict[str, Any] = {}

        def fam(cls: type, name: str, text: str, labels: list[str]) -> Any:
            if name not in f:
                f[name] = cls(name, text, labels=labels)
            return f[name]

        rej = fam(
            CounterMetricFamily,
            P + "rejected_requests",
            "Number of requests rejected by API Priority and Fairness subsystem",
            [*PL_FS, "reason"],
        )
        disp = fam(
            CounterMetricFamily,
            P + "dispatched_requests",
            "Number of requests executed by API Priority and Fairness subsystem",
            PL_FS,
        )
        noacc = fam(
            CounterMetricFamily,
            P + "request_dispatch_no_accommodation",
            "Number of times a dispatch attempt resulted in a non accommodation due to "
            "lack of available seats",
            PL_FS,
        )
        gauges = {
            "current_inqueue_requests": "Number of requests currently pending in queues of the "
            "API Priority and Fairness subsystem",
            "current_inqueue_seats": "Number of seats currently pending in queues of the API "
            "Priority and Fairness subsystem",
            "current_executing_requests": "Number of requests in initial (for a WATCH) or any "
            "(for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            "current_executing_seats": "Concurrency (number of seats) occupied by the currently "
            "executing (initial stage for a WATCH, any stage otherwise) requests in the API "
            "Priority and Fairness subsystem",
            "request_concurrency_in_use": "Concurrency (number of seats) occupied by the "
            "currently executing (initial stage for a WATCH, any stage otherwise) requests in "
            "the API Priority and Fairness subsystem",
        }
        g = {k: fam(GaugeMetricFamily, P + k, v, PL_FS) for k, v in gauges.items()}
        old_inqueue_seats = fam(
            GaugeMetricFamily,
            "apiserver_current_inqueue_seats",
            "Number of seats currently pending in queues of the API "
            "Priority and Fairness subsystem",
            PL_FS,
        )
        qlen = fam(
            HistogramMetricFamily,
            P + "request_queue_length_after_enqueue",
            "Length of queue in the API Priority and Fairness subsystem, as seen by each "
            "request after it is enqueued",
            PL_FS,
        )
        wait = fam(
            HistogramMetricFamily,
            P + "request_wait_duration_seconds",
            "Length of time a request spent waiting in its queue",
            [*PL_FS, "execute"],
        )
        exe = fam(
            HistogramMetricFamily,
            P + "request_execution_seconds",
            "Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of "
            "request execution in the API Priority and Fairness subsystem",
            [*PL_FS, "type"],
        )
        watch = fam(
            HistogramMetricFamily,
            P + "watch_count_samples",
            "count of watchers for mutating requests in API Priority and Fairness",
            PL_FS,
        )
        work = fam(
            HistogramMetricFamily,
            P + "work_estimated_seats",
            "Number of estimated seats (maximum of initial and final seats) associated "
            "with requests in API Priority and Fairness",
            PL_FS,
        )
        for pl, level in levels:
            for fs, s in sorted(level.flow_stats.items()):
                lv = [pl, fs]
                for reason, n in s.rejected.items():
                    rej.add_metric([*lv, reason], n)
                disp.add_metric(lv, s.dispatched)
                noacc.add_metric(lv, s.no_accommodation)
                g["current_inqueue_requests"].add_metric(lv, s.inqueue_requests)
                g["current_inqueue_seats"].add_metric(lv, s.inqueue_seats)
                old_inqueue_seats.add_metric(lv, s.inqueue_seats)
                g["current_executing_requests"].add_metric(lv, s.executing_requests)
                g["current_executing_seats"].add_metric(lv, s.executing_seats)
                g["request_concurrency_in_use"].add_metric(lv, s.executing_seats)
                if not s.work_estimated_seats.count:
                    # no request yet: counters and gauges at 0 (what rate() needs), but not
                    # seven empty histograms per FlowSchema, which would triple a scrape
                    continue
                for fam_, h, extra in (
                    (qlen, s.queue_length_after_enqueue, []),
                    (wait, s.wait_seconds["true"], ["true"]),
                    (wait, s.wait_seconds["false"], ["false"]),
                    (exe, s.execution_seconds["regular"], ["regular"]),
                    (exe, s.execution_seconds["watch"], ["watch"]),
                    (watch, s.watch_count_samples, []),
                    (work, s.work_estimated_seats, []),
                ):
                    fam_.add_metric([*lv, *extra], histogram_buckets(h), h.sum)
        yield from f.values()

    def _per_level(self, levels: list[tuple[str, PriorityLevel]]) -> Iterator[Metric]:
        gauges = {
            "nominal_limit_seats": ("Nominal number of execution seats configured for each "
                                    "priority level", "nominal_cl"),
            "request_concurrency_limit": ("Nominal number of execution seats configured for "
                                          "each priority level", "nominal_cl"),
            "lower_limit_seats": ("Configured lower bound on number of execution seats "
                                  "available to each priority level", "min_cl"),
            "upper_limit_seats": ("Configured upper bound on number of execution seats "
                                  "available to each priority level", "max_cl"),
            "current_limit_seats": ("current derived number of execution seats available to "
                                    "each priority level", "current_cl"),
            "demand_seats_high_watermark": ("High watermark, over last adjustment period, of "
                                            "demand_seats", "high_watermark"),
            "demand_seats_average": ("Time-weighted average, over last adjustment period, of "
                                     "demand_seats", "demand_avg"),
            "demand_seats_stdev": ("Time-weighted standard deviation, over last adjustment "
                                   "period, of demand_seats", "demand_stdev"),
            "demand_seats_smoothed": ("Smoothed seat demands", "smoothed"),
            "target_seats": ("Seat allocation targets", "target"),
        }  # fmt: skip
        fams = {k: GaugeMetricFamily(P + k, t, labels=["priority_level"])
                for k, (t, _a) in gauges.items()}  # fmt: skip
        r_gauges = {
            "current_r": "R(time of last change)",
            "dispatch_r": "R(time of last dispatch)",
            "latest_s": "S(most recently dispatched request)",
        }
        rf = {
            k: GaugeMetricFamily(P + k, v, labels=["priority_level"]) for k, v in r_gauges.items()
        }
        bounds = {
            "next_s_bounds": GaugeMetricFamily(P + "next_s_bounds", "min and max, over queues, "
                                               "of S(oldest waiting request in queue)",
                                               labels=["priority_level", "bound"]),
            "next_discounted_s_bounds": GaugeMetricFamily(
                P + "next_discounted_s_bounds", "min and max, over queues, of S(oldest waiting "
                "request in queue) - estimated work in progress",
                labels=["priority_level", "bound"]),
        }  # fmt: skip
        epoch = CounterMetricFamily(P + "epoch_advance", "Number of times the queueset's "
                                    "progress meter jumped backward",
                                    labels=["priority_level", "success"])  # fmt: skip
        seat_util = HistogramMetricFamily(
            P + "priority_level_seat_utilization", "Observations, at the end of every "
            "nanosecond, of utilization of seats for any stage of execution (but only initial "
            "stage for WATCHes)", labels=["priority_level", "phase"])  # fmt: skip
        req_util = HistogramMetricFamily(
            P + "priority_level_request_utilization", "Observations, at the end of every "
            "nanosecond, of number of requests (as a fraction of the relevant limit) waiting or "
            "in any stage of execution (but only initial stage for WATCHes)",
            labels=["phase", "priority_level"])  # fmt: skip
        seat_seconds = CounterMetricFamily(
            "gateway_flowcontrol_priority_level_seat_seconds",
            "Seats executing (initial stage for WATCHes) integrated over time, in seat-seconds",
            labels=["priority_level"],
        )
        demand = HistogramMetricFamily(
            P + "demand_seats", "Observations, at the end of every nanosecond, of (the number "
            "of seats each priority level could use) / (nominal number of seats for that "
            "level)", labels=["priority_level"])  # fmt: skip
        for pl, level in levels:
            for k, (_t, attr) in gauges.items():
                fams[k].add_metric([pl], float(getattr(level, attr) or 0))
            qs = level.qs
            rf["current_r"].add_metric([pl], qs.current_r / SCALE)
            rf["dispatch_r"].add_metric([pl], qs.dispatch_r / SCALE)
            rf["latest_s"].add_metric([pl], qs.latest_s / SCALE)
            waiting = [q for q in qs.queues if q.n_waiting > 0]
            g_ss = qs.estimated_service_ss
            for name, values in (
                ("next_s_bounds", [q.next_dispatch_r for q in waiting]),
                ("next_discounted_s_bounds",
                 [q.next_dispatch_r - q.seats_in_use * g_ss for q in waiting]),
            ):  # fmt: skip
                lo = min(values) / SCALE if values else 0.0
                hi = max(values) / SCALE if values else 0.0
                bounds[name].add_metric([pl, "min"], lo)
                bounds[name].add_metric([pl, "max"], hi)
            for success, n in sorted(qs.epoch_advances.items()):
                epoch.add_metric([pl, success], n)
            b, s = _timing(level.seat_utilization)
            seat_util.add_metric([pl, "executing"], b, s)
            for phase, h in sorted(level.request_utilization.items()):
                b, s = _timing(h)
                req_util.add_metric([phase, pl], b, s)
            b, s = _timing(level.demand_seats)
            demand.add_metric([pl], b, s)
            seat_seconds.add_metric([pl], level.seat_seconds)
        yield from fams.values()
        yield from rf.values()
        yield from bounds.values()
        yield epoch
        yield seat_util
        yield req_util
        yield demand
        yield seat_seconds
