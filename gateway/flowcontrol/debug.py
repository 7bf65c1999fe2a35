"""Kubernetes' APF debug dumps (``/debug/api_priority_and_fairness/...``) as text.

Columns and formats follow kube-apiserver: cells joined by ``,`` and aligned like Go's
``tabwriter`` (min width 8, padding 1); R values as ``NNN.NNNNNNNNss``; times in RFC 3339
with nanoseconds, UTC.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

from gateway.flowcontrol.controller import FlowController
from gateway.flowcontrol.digest import RequestDigest
from gateway.flowcontrol.queueset import WAITING, Request
from gateway.flowcontrol.seats import format_ss


def tabwrite(rows: list[list[str]]) -> str:
    """Align every cell but a row's last, as ``tabwriter.NewWriter(w, 8, 0, 1, ' ', 0)``."""
    cells = [[f"{c}," for c in row[:-1]] + [row[-1]] for row in rows]
    widths: list[int] = []
    for row in cells:
        for i, cell in enumerate(row[:-1]):
            width = max(len(cell) + 1, 8)
            if i == len(widths):
                widths.append(width)
            elif width > widths[i]:
                widths[i] = width
    lines = []
    for row in cells:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("".join(padded) + row[-1])
    return "\n".join(lines) + "\n"


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String``: ``0s``, ``5ms``, ``1.5µs``, ``1m30s``, ``1h0m0s``."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_decimal(ns, 1000)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_decimal(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    head = f"{hours}h{minutes}m" if hours else f"{minutes}m" if minutes else ""
    return f"{sign}{head}{_decimal(rest, 10**9)}s"


def _decimal(value: int, unit: int) -> str:
    """``value / unit`` written exactly, without trailing zeros (``unit`` a power of ten)."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    return f"{whole}.{frac:0{len(str(unit)) - 1}d}".rstrip("0")


def dump_priority_levels(controller: FlowController) -> str:
    rows = [
        [
            "PriorityLevelName", "ActiveQueues", "IsIdle", "IsQuiescing", "WaitingRequests",
            "ExecutingRequests", "DispatchedRequests", "RejectedRequests", "TimedoutRequests",
            "CancelledRequests",
        ]
    ]  # fmt: skip
    for name in sorted(controller.levels):
        level = controller.levels[name]
        qs = level.qs
        rows.append(
            [
                name,
                str(sum(1 for q in qs.queues if q.n_waiting)),
                str(qs.is_idle).lower(),
                str(level.quiescing).lower(),
                str(qs.tot_requests_waiting),
                str(qs.tot_requests_executing),
                str(qs.dispatched),
                str(qs.rejected),
                "0",  # never incremented by kube-apiserver either
                str(qs.cancelled),
            ]
        )
    return tabwrite(rows)


def dump_queues(controller: FlowController) -> str:
    rows = [
        [
            "PriorityLevelName", "Index", "PendingRequests", "ExecutingRequests", "SeatsInUse",
            "NextDispatchR", "InitialSeatsSum", "MaxSeatsSum", "TotalWorkSum",
        ]
    ]  # fmt: skip
    for name, level in controller.levels.items():
        for queue in level.qs.queues:
            rows.append(
                [
                    name,
                    str(queue.index),
                    str(queue.n_waiting),
                    str(len(queue.executing)),
                    str(queue.seats_in_use),
                    format_ss(queue.next_dispatch_r),
                    str(queue.initial_seats_sum),
                    str(queue.max_seats_sum),
                    format_ss(queue.total_work_sum),
                ]
            )
    return tabwrite(rows)


def dump_requests(
    controller: FlowController,
    *,
    include_details: bool = False,
    to_wall: Callable[[float], float] | None = None,
) -> str:
    """``to_wall`` maps the controller's clock to Unix time (default: identity)."""
    header = [
        "PriorityLevelName", "FlowSchemaName", "QueueIndex", "RequestIndexInQueue",
        "FlowDistingsher", "ArriveTime", "InitialSeats", "FinalSeats", "AdditionalLatency",
        "StartTime",
    ]  # fmt: skip
    if include_details:
        header += [
            "UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion", "Resource",
            "SubResource",
        ]  # fmt: skip
    rows = [header]
    wall = to_wall or (lambda t: t)

    def row(level: str, req: Request, queue: int, index: int) -> list[str]:
        started = req.state != WAITING
        cells = [
            level,
            req.fs_name,
            str(queue),
            str(index),
            req.distinguisher,
            _rfc3339(wall(req.arrival_time)),
            str(req.initial_seats),
            str(req.final_seats),
            go_duration(req.additional_latency),
            _rfc3339(wall(req.start_time)) if started else "0001-01-01T00:00:00Z",
        ]
        if include_details:
            cells += _details(req.descr)
        return cells

    for name, level in controller.levels.items():
        qs = level.qs
        for queue in qs.queues:
            for i, req in enumerate(qs.waiting_requests(queue)):
                rows.append(row(name, req, queue.index, i))
            for req in queue.executing:
                rows.append(row(name, req, queue.index, -1))
        for req in qs.executing_sans_queue:
            rows.append(row(name, req, -1, -1))
    return tabwrite(rows)


def _details(descr: object) -> list[str]:
    if not isinstance(descr, RequestDigest):
        return [""] * 8
    info = descr.info
    version = f"{info.api_group}/{info.api_version}" if info.api_group else info.api_version
    return [
        descr.user.name, info.verb, info.path, info.namespace, info.name, version,
        info.resource, info.subresource,
    ]  # fmt: skip


def _rfc3339(unix: float) -> str:
    whole = math.floor(unix)
    ns = round((unix - whole) * 1e9)
    if ns == 1_000_000_000:  # rounded up into the next second
        whole, ns = whole + 1, 0
    dt = datetime.fromtimestamp(whole, UTC)
    frac = f".{ns:09d}".rstrip("0") if ns else ""
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"
