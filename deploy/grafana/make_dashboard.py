# ruff: noqa: E501 - PromQL expressions read better unwrapped
"""Writes apf-gateway.json (Grafana dashboard). Run: python deploy/grafana/make_dashboard.py

APF panels use the Kubernetes metric names the front door exports (apiserver_flowcontrol_*),
so they also work on a real kube-apiserver. Platform panels use the routers' (apf_router_*)
and the manager's (apf_manager_*) own metrics, plus the front door's upstream errors and
configuration reloads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PL = 'priority_level=~"$priority_level"'
RI = "$__rate_interval"


def panel(
    title: str, targets: list[tuple[str, str]], unit: str = "short", **extra: Any
) -> dict[str, Any]:
    return {
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
        **extra,
    }


def quantiles(metric: str, extra: str = "") -> list[tuple[str, str]]:
    sel = PL + (f",{extra}" if extra else "")
    return [
        (
            f"histogram_quantile({q}, sum by (priority_level, le) "
            f"(rate({metric}_bucket{{{sel}}}[{RI}])))",
            f"p{round(q * 100)} {{{{priority_level}}}}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


APF = [
    panel(
        "Seat utilization (time-weighted mean) per priority level",
        [
            (
                f"sum by (priority_level) (rate(apiserver_flowcontrol_priority_level_seat_utilization_sum{{{PL}}}[{RI}]))"
                f" / sum by (priority_level) (rate(apiserver_flowcontrol_priority_level_seat_utilization_count{{{PL}}}[{RI}]))",
                "{{priority_level}}",
            )
        ],
        "percentunit",
    ),
    panel(
        "Seats executing vs current limit",
        [
            (
                f"sum by (priority_level) (apiserver_flowcontrol_current_executing_seats{{{PL}}})",
                "executing {{priority_level}}",
            ),
            (
                f"max by (priority_level) (apiserver_flowcontrol_current_limit_seats{{{PL}}})",
                "limit {{priority_level}}",
            ),
        ],
    ),
    panel(
        "Borrowing: nominal, lower, upper and current limits",
        [
            (
                f"max by (priority_level) (apiserver_flowcontrol_nominal_limit_seats{{{PL}}})",
                "nominal {{priority_level}}",
            ),
            (
                f"max by (priority_level) (apiserver_flowcontrol_lower_limit_seats{{{PL}}})",
                "lower {{priority_level}}",
            ),
            (
                f"max by (priority_level) (apiserver_flowcontrol_upper_limit_seats{{{PL}}})",
                "upper {{priority_level}}",
            ),
            (
                f"max by (priority_level) (apiserver_flowcontrol_current_limit_seats{{{PL}}})",
                "current {{priority_level}}",
            ),
        ],
    ),
    panel(
        "Requests waiting in queues",
        [
            (
                f"sum by (priority_level) (apiserver_flowcontrol_current_inqueue_requests{{{PL}}})",
                "{{priority_level}}",
            )
        ],
    ),
    panel(
        "Queue length after enqueue",
        quantiles("apiserver_flowcontrol_request_queue_length_after_enqueue"),
    ),
    panel(
        "Queue wait (requests that executed)",
        quantiles("apiserver_flowcontrol_request_wait_duration_seconds", 'execute="true"'),
        "s",
    ),
    panel(
        "Rejections by reason",
        [
            (
                f"sum by (priority_level, reason) (rate(apiserver_flowcontrol_rejected_requests_total{{{PL}}}[{RI}]))",
                "{{priority_level}} {{reason}}",
            )
        ],
        "reqps",
    ),
    panel(
        "Dispatched requests",
        [
            (
                f"sum by (priority_level) (rate(apiserver_flowcontrol_dispatched_requests_total{{{PL}}}[{RI}]))",
                "{{priority_level}}",
            )
        ],
        "reqps",
    ),
    panel("Execution time", quantiles("apiserver_flowcontrol_request_execution_seconds"), "s"),
]


def platform_quantiles(metric: str, by: str) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket[{RI}])))",
            f"p{round(q * 100)} {{{{{by}}}}}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


PLATFORM = [
    panel(
        "Invocations by status",
        [
            (
                f"sum by (status) (rate(apf_router_invocations_total[{RI}]))",
                "{{status}}",
            )
        ],
        "reqps",
    ),
    panel(
        "Invocations per action",
        [
            (
                f"sum by (namespace, action) (rate(apf_router_invocations_total[{RI}]))",
                "{{namespace}}/{{action}}",
            )
        ],
        "reqps",
    ),
    panel(
        "Cold starts by kind and per action",
        [
            # by kind: series at 0 from the start, so every cold start shows
            (
                f"sum by (kind) (increase(apf_router_init_duration_seconds_count[{RI}]))",
                "all actions {{kind}}",
            ),
            # per action: a series starts at an action's first activation on a router, so
            # increase() misses that first cold start (docs/deploy.md, "Prometheus")
            (
                f"sum by (namespace, action) (increase(apf_router_cold_starts_total[{RI}]))",
                "{{namespace}}/{{action}}",
            ),
        ],
    ),
    panel(
        "Cold start /init time",
        platform_quantiles("apf_router_init_duration_seconds", "kind"),
        "s",
    ),
    panel(
        "Wait for a container slot (warm and cold)",
        platform_quantiles("apf_router_wait_duration_seconds", "start"),
        "s",
    ),
    panel(
        "Containers per action by state (busy, warm, paused)",
        [
            (
                "sum by (namespace, action, state) (apf_router_containers)",
                "{{namespace}}/{{action}} {{state}}",
            )
        ],
    ),
    panel(
        "Manager: containers created and removed",
        [
            (
                f"sum by (source, result) (increase(apf_manager_container_creations_total[{RI}]))",
                "created {{source}} {{result}}",
            ),
            (
                f"sum by (reason) (increase(apf_manager_container_removals_total[{RI}]))",
                "removed {{reason}}",
            ),
        ],
    ),
    panel(
        "Quota rejections and evictions",
        [
            (
                f"sum by (namespace, limit) (increase(apf_manager_quota_rejections_total[{RI}]))",
                "429 {{namespace}} {{limit}}",
            ),
            (
                f"sum by (policy, reason, outcome) (increase(apf_manager_evictions_total[{RI}]))",
                "{{policy}} {{reason}}: {{outcome}}",
            ),
        ],
    ),
    panel(
        "Activation record write failures",
        [
            (
                f"sum(increase(apf_router_activation_write_failures_total[{RI}]))",
                "failed batch writes",
            )
        ],
    ),
    panel(
        "Upstream errors by kind (front door to routers)",
        [
            (
                f"sum by (upstream, kind) (rate(gateway_upstream_errors_total[{RI}]))",
                "{{upstream}} {{kind}}",
            )
        ],
        "reqps",
    ),
    panel(
        "Configuration reloads",
        [(f"sum by (result) (increase(gateway_config_reloads_total[{RI}]))", "{{result}}")],
    ),
]


def layout(panels: list[dict[str, Any]], y: int, row: str, row_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "type": "row",
            "title": row,
            "collapsed": False,
            "id": row_id,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "panels": [],
        }
    ]
    for i, p in enumerate(panels):
        p["id"] = row_id + 1 + i
        p["gridPos"] = {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 1 + 8 * (i // 2)}
        out.append(p)
    return out


def dashboard() -> dict[str, Any]:
    panels = layout(APF, 0, "API Priority and Fairness (per priority level)", 100)
    panels += layout(PLATFORM, 1 + 8 * ((len(APF) + 1) // 2), "Platform", 200)
    return {
        "title": "apf-gateway",
        "uid": "apf-gateway",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "tags": ["apf-gateway", "apf", "flowcontrol"],
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Data source",
                },
                {
                    "name": "priority_level",
                    "type": "query",
                    "label": "Priority level",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {
                        "query": "label_values(apiserver_flowcontrol_nominal_limit_seats, priority_level)",
                        "refId": "pl",
                    },
                    "multi": True,
                    "includeAll": True,
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":
    target = Path(__file__).with_name("apf-gateway.json")
    target.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {target}")
