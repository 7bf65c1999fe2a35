"""APF in front of a real upstream: admission, the three rejection reasons plus cancellation,
exempt isolation, watches, debug access and headers. The core runs on a fake clock that the
test advances, so the time-out case needs no sleeping."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.apfconfig import bootstrap
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.controller import FlowController
from gateway.flowcontrol.digest import ANONYMOUS, RequestDigest
from gateway.server import Gateway
from gateway.settings.sources import ConfigLoadError, load_config
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, holding, start_gateway
from tests.support.wait import wait_until

CONFIG = str(Path(__file__).with_name("apf_config.yaml"))
TEXT_429 = "Too many requests, please try again later.\n"
ADMIN = {"Authorization": "Bearer admin-token"}


@pytest.fixture
def gw(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> Iterator[ServerThread]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\nuser-token,alice,2,"dev"\n')
    server = start_gateway(
        {"upstreams": [{"url": upstream.url}], "authentication": {"tokenAuthFile": str(tokens)}},
        [CONFIG],
        clock=lambda loop: FakeEventClock(start=1000.0),
    )
    gateways.append(server)
    yield server


def level_state(gw: ServerThread, name: str) -> dict[str, int]:
    app: Gateway = gw.app
    assert app.controller is not None
    qs = app.controller.levels[name].qs
    return gw.call(
        lambda: {
            "waiting": qs.tot_requests_waiting,
            "executing": qs.tot_requests_executing,
            "seats": qs.tot_seats_in_use,
        }
    )


def metric(gw: ServerThread, name: str, **labels: str) -> float:
    text = httpx.get(gw.url + "/metrics", headers=ADMIN).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def hold(
    pool: ThreadPoolExecutor, gw: ServerThread, path: str, **kw: Any
) -> Future[httpx.Response]:
    return pool.submit(httpx.get, gw.url + path, timeout=10, **kw)


def test_headers_on_success(gw: ServerThread) -> None:
    r = httpx.get(gw.url + "/queue/echo")
    assert r.status_code == 200
    assert r.headers["x-kubernetes-pf-flowschema-uid"]
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
    assert (
        r.headers["x-kubernetes-pf-flowschema-uid"]
        != r.headers["x-kubernetes-pf-prioritylevel-uid"]
    )


def test_concurrency_limit_rejects_with_retry_after(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    first = hold(pool, gw, "/reject/hold/a")
    wait_until(lambda: "a" in holding(upstream))
    r = httpx.get(gw.url + "/reject/echo")
    assert r.status_code == 429
    assert r.text == TEXT_429
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
    httpx.get(upstream.url + "/release/a")
    assert first.result().status_code == 200
    assert metric(gw, "apiserver_flowcontrol_rejected_requests_total", flow_schema="reject-fs",
                  priority_level="tiny-reject", reason="concurrency-limit") == 1  # fmt: skip
    assert level_state(gw, "tiny-reject")["seats"] == 0


def test_queue_full_time_out_and_cancel_leave_no_seat_behind(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    running = hold(pool, gw, "/queue/hold/a")
    wait_until(lambda: "a" in holding(upstream))
    queued = hold(pool, gw, "/queue/hold/b")
    wait_until(lambda: level_state(gw, "tiny-queue")["waiting"] == 1)

    full = httpx.get(gw.url + "/queue/echo")
    assert full.status_code == 429 and full.text == TEXT_429

    # The queued request's wait limit is 15 s (request timeout 60 s / 4) on the fake clock.
    clock: FakeEventClock = gw.app.clock
    gw.call(lambda: clock.advance(14.0))
    assert level_state(gw, "tiny-queue")["waiting"] == 1
    gw.call(lambda: clock.advance(2.0))
    timed_out = queued.result()
    assert timed_out.status_code == 429 and int(timed_out.headers["retry-after"]) >= 1

    # A client that disconnects while queued leaves the queue.
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.sendall(b"GET /queue/echo HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: level_state(gw, "tiny-queue")["waiting"] == 1)
    wait_until(lambda: level_state(gw, "tiny-queue")["waiting"] == 0)

    httpx.get(upstream.url + "/release/a")
    assert running.result().status_code == 200
    assert level_state(gw, "tiny-queue") == {"waiting": 0, "executing": 0, "seats": 0}
    assert httpx.get(gw.url + "/queue/echo").status_code == 200
    labels = {"flow_schema": "queue-fs", "priority_level": "tiny-queue"}
    rejected = "apiserver_flowcontrol_rejected_requests_total"
    assert metric(gw, rejected, reason="queue-full", **labels) == 1
    assert metric(gw, rejected, reason="time-out", **labels) == 1
    assert metric(gw, rejected, reason="cancelled", **labels) == 1
    assert metric(gw, "apiserver_flowcontrol_current_inqueue_requests", **labels) == 0


def test_exempt_traffic_passes_a_saturated_level(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    running = hold(pool, gw, "/queue/hold/a")
    wait_until(lambda: "a" in holding(upstream))
    queued = hold(pool, gw, "/queue/hold/b")
    wait_until(lambda: level_state(gw, "tiny-queue")["waiting"] == 1)
    assert httpx.get(gw.url + "/queue/echo").status_code == 429
    r = httpx.get(gw.url + "/queue/echo", headers=ADMIN, timeout=3)
    assert r.status_code == 200
    exempt_uid = r.headers["x-kubernetes-pf-prioritylevel-uid"]
    assert exempt_uid != running_uid(gw)
    httpx.get(upstream.url + "/release/a")
    httpx.get(upstream.url + "/release/b")
    assert running.result().status_code == 200 and queued.result().status_code == 200


def running_uid(gw: ServerThread) -> str:
    return str(httpx.get(gw.url + "/queue/echo").headers.get("x-kubernetes-pf-prioritylevel-uid"))


def test_watch_gives_its_seat_back_after_the_first_chunk(
    gw: ServerThread, upstream: ServerThread
) -> None:
    with httpx.stream("GET", gw.url + "/api/v1/watch/namespaces/ns/stream/1", timeout=5) as w:
        assert w.headers["x-kubernetes-pf-prioritylevel-uid"]
        assert next(w.iter_lines()) == "chunk0"
        # Same one-seat level; would queue forever (fake clock) if the watch still held it.
        r = httpx.get(gw.url + "/api/v1/namespaces/ns/configmaps", timeout=3)
        assert r.status_code == 200
        httpx.get(upstream.url + "/release/stream")
    assert metric(gw, "apiserver_flowcontrol_request_execution_seconds_count",
                  priority_level="tiny-queue", type="watch") == 1  # fmt: skip


def test_watch_from_a_resource_version_gives_its_seat_back_at_the_response_headers(
    gw: ServerThread, upstream: ServerThread
) -> None:
    """An informer's re-watch gets no initial events: kube-apiserver counts it initialized once
    established, so a quiet watch (no event, no bookmark yet) holds no seat."""
    url = gw.url + "/api/v1/watch/namespaces/ns/stream/0?resourceVersion=5&allowWatchBookmarks=1"
    with httpx.stream("GET", url, timeout=5) as w:
        assert w.status_code == 200 and w.headers["x-kubernetes-pf-prioritylevel-uid"]
        wait_until(lambda: level_state(gw, "tiny-queue")["seats"] == 0)
        # Same one-seat level; would queue forever (fake clock) if the watch still held it.
        assert httpx.get(gw.url + "/api/v1/namespaces/ns/configmaps", timeout=3).status_code == 200
        httpx.get(upstream.url + "/release/stream")


def test_watch_list_holds_its_seat_until_the_initial_events_end_bookmark(
    gw: ServerThread, upstream: ServerThread
) -> None:
    query = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    url = gw.url + "/api/v1/watch/namespaces/ns/watchlist/2?" + query
    with httpx.stream("GET", url, timeout=5) as w:
        lines = w.iter_lines()
        assert [json.loads(next(lines))["type"] for _ in range(2)] == ["ADDED", "ADDED"]
        # Initial events relayed, but not their end: the seat is still held.
        assert level_state(gw, "tiny-queue") == {"waiting": 0, "executing": 1, "seats": 1}
        httpx.get(upstream.url + "/release/bookmark")
        bookmark = json.loads(next(lines))
        assert bookmark["object"]["metadata"]["annotations"] == {
            "k8s.io/initial-events-end": "true"
        }
        wait_until(lambda: level_state(gw, "tiny-queue")["seats"] == 0)
        assert httpx.get(gw.url + "/api/v1/namespaces/ns/configmaps", timeout=3).status_code == 200
        httpx.get(upstream.url + "/release/stream")
    assert metric(gw, "apiserver_flowcontrol_request_execution_seconds_count",
                  priority_level="tiny-queue", type="watch") == 1  # fmt: skip


TIMEOUT_STATUS = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "Timeout: request did not complete within the allotted timeout",
    "reason": "Timeout", "code": 504,
}  # fmt: skip


def test_request_timeout_bounds_an_executing_request(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    """requestTimeout (60 s) from arrival: past it, the request is abandoned, the client gets
    kube's 504 Status and the seat goes back (kube-apiserver's WithTimeoutForNonLongRunning-
    Requests). The core's clock is fake: only advancing it passes the deadline."""
    clock: FakeEventClock = gw.app.clock
    slow = hold(pool, gw, "/queue/hold/t1")
    wait_until(lambda: "t1" in holding(upstream))
    gw.call(lambda: clock.advance(59.0))
    assert level_state(gw, "tiny-queue")["seats"] == 1 and not slow.done()
    gw.call(lambda: clock.advance(2.0))
    r = slow.result(timeout=5)
    assert r.status_code == 504 and r.json() == TIMEOUT_STATUS
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"]
    assert level_state(gw, "tiny-queue") == {"waiting": 0, "executing": 0, "seats": 0}
    assert httpx.get(gw.url + "/queue/echo", timeout=3).status_code == 200
    httpx.get(upstream.url + "/release/t1")


def test_exempt_requests_are_bounded_too(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    """kube's timeout filter does not look at the priority level: an exempt request (here
    system:masters) has the same deadline, kept by the exempt level's queue set."""
    clock: FakeEventClock = gw.app.clock
    slow = hold(pool, gw, "/queue/hold/t3", headers=ADMIN)
    wait_until(lambda: "t3" in holding(upstream))
    gw.call(lambda: clock.advance(61.0))
    r = slow.result(timeout=5)
    assert r.status_code == 504 and r.json() == TIMEOUT_STATUS
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"] != running_uid(gw)
    httpx.get(upstream.url + "/release/t3")


def test_a_shorter_timeout_parameter_is_the_deadline(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    clock: FakeEventClock = gw.app.clock
    slow = hold(pool, gw, "/api/v1/namespaces/ns/hold/t2?timeout=5s")
    wait_until(lambda: "t2" in holding(upstream))
    gw.call(lambda: clock.advance(4.0))
    assert not slow.done()
    gw.call(lambda: clock.advance(2.0))
    assert slow.result(timeout=5).json() == TIMEOUT_STATUS
    assert level_state(gw, "tiny-queue")["seats"] == 0
    httpx.get(upstream.url + "/release/t2")


def test_a_response_under_way_at_its_deadline_has_its_connection_closed(
    gw: ServerThread, upstream: ServerThread
) -> None:
    clock: FakeEventClock = gw.app.clock
    with httpx.stream("GET", gw.url + "/queue/stream/1", timeout=5) as r:
        lines = r.iter_lines()
        assert r.status_code == 200 and next(lines) == "chunk0"
        gw.call(lambda: clock.advance(61.0))
        with pytest.raises(httpx.RemoteProtocolError):
            list(lines)  # the chunked body never ends: the connection is closed
    assert level_state(gw, "tiny-queue") == {"waiting": 0, "executing": 0, "seats": 0}
    httpx.get(upstream.url + "/release/stream")


def test_non_watch_long_running_bypasses_flow_control(gw: ServerThread) -> None:
    r = httpx.get(gw.url + "/api/v1/namespaces/ns/pods/p/exec")
    assert r.status_code == 200
    assert "x-kubernetes-pf-flowschema-uid" not in r.headers


def test_status_body_when_asked(upstream: ServerThread, gateways: list[ServerThread],
                                pool: ThreadPoolExecutor) -> None:  # fmt: skip
    gw = start_gateway(
        {"upstreams": [{"url": upstream.url}], "tooManyRequestsBody": "status"}, [CONFIG]
    )
    gateways.append(gw)
    first = hold(pool, gw, "/reject/hold/s")
    wait_until(lambda: "s" in holding(upstream))
    r = httpx.get(gw.url + "/reject/echo")
    httpx.get(upstream.url + "/release/s")
    first.result()
    assert r.status_code == 429
    doc = r.json()
    assert doc["kind"] == "Status" and doc["reason"] == "TooManyRequests"
    assert "tiny-reject" in doc["message"] and "concurrency-limit" in doc["message"]


def test_debug_dumps_only_for_allowed_groups(gw: ServerThread) -> None:
    base = gw.url + "/debug/api_priority_and_fairness/"
    assert httpx.get(base + "dump_priority_levels").status_code == 403
    assert httpx.get(base + "dump_queues", headers={"Authorization": "Bearer user-token"}
                     ).status_code == 403  # fmt: skip
    r = httpx.get(base + "dump_priority_levels", headers=ADMIN)
    assert r.status_code == 200 and r.text.startswith("PriorityLevelName")
    assert "tiny-queue" in r.text
    assert httpx.get(base + "dump_queues", headers=ADMIN).text.startswith("PriorityLevelName")
    detailed = httpx.get(base + "dump_requests?includeRequestDetails=1", headers=ADMIN).text
    assert "UserName" in detailed.splitlines()[0]


def test_invalid_token_is_401_status(gw: ServerThread) -> None:
    r = httpx.get(gw.url + "/queue/echo", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert r.json()["reason"] == "Unauthorized"


# The Kubernetes flow-control documentation's observability list (31 names) but the two
# deprecated gauges Kubernetes hides, plus the current name of the renamed inqueue-seats gauge;
# each with the label names Kubernetes gives it.
PL_FS = {"priority_level", "flow_schema"}
PL = {"priority_level"}
EXPECTED_LABELS = {
    "apiserver_flowcontrol_rejected_requests_total": PL_FS | {"reason"},
    "apiserver_flowcontrol_dispatched_requests_total": PL_FS,
    "apiserver_flowcontrol_current_inqueue_requests": PL_FS,
    "apiserver_flowcontrol_current_inqueue_seats": PL_FS,
    "apiserver_flowcontrol_current_executing_requests": PL_FS,
    "apiserver_flowcontrol_current_executing_seats": PL_FS,
    "apiserver_flowcontrol_request_wait_duration_seconds_bucket": PL_FS | {"execute", "le"},
    "apiserver_flowcontrol_nominal_limit_seats": PL,
    "apiserver_current_inqueue_requests": {"request_kind"},
    "apiserver_current_inflight_requests": {"request_kind"},
    "apiserver_current_inqueue_seats": PL_FS,
    "apiserver_flowcontrol_read_vs_write_current_requests_bucket": {"phase", "request_kind", "le"},
    "apiserver_flowcontrol_priority_level_request_utilization_bucket": PL | {"phase", "le"},
    "apiserver_flowcontrol_priority_level_seat_utilization_bucket": PL | {"phase", "le"},
    "apiserver_flowcontrol_request_queue_length_after_enqueue_bucket": PL_FS | {"le"},
    "apiserver_flowcontrol_lower_limit_seats": PL,
    "apiserver_flowcontrol_upper_limit_seats": PL,
    "apiserver_flowcontrol_demand_seats_bucket": PL | {"le"},
    "apiserver_flowcontrol_demand_seats_high_watermark": PL,
    "apiserver_flowcontrol_demand_seats_average": PL,
    "apiserver_flowcontrol_demand_seats_stdev": PL,
    "apiserver_flowcontrol_demand_seats_smoothed": PL,
    "apiserver_flowcontrol_target_seats": PL,
    "apiserver_flowcontrol_seat_fair_frac": set(),
    "apiserver_flowcontrol_current_limit_seats": PL,
    "apiserver_flowcontrol_request_execution_seconds_bucket": PL_FS | {"type", "le"},
    "apiserver_flowcontrol_watch_count_samples_bucket": PL_FS | {"le"},
    "apiserver_flowcontrol_work_estimated_seats_bucket": PL_FS | {"le"},
    "apiserver_flowcontrol_request_dispatch_no_accommodation_total": PL_FS,
    "apiserver_flowcontrol_epoch_advance_total": PL | {"success"},
}
WAIT_BUCKETS = ["0.0", "0.005", "0.02", "0.05", "0.1", "0.2", "0.5", "1.0", "2.0", "5.0",
                "10.0", "15.0", "30.0", "+Inf"]  # fmt: skip


def test_every_kubernetes_metric_is_exported_with_its_labels(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    assert httpx.get(gw.url + "/queue/echo").status_code == 200
    assert httpx.get(gw.url + "/reject/echo").status_code == 200
    text = httpx.get(gw.url + "/metrics", headers=ADMIN).text
    labels: dict[str, set[str]] = {}
    buckets: list[str] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels.setdefault(s.name, set()).update(s.labels)
            if s.name == "apiserver_flowcontrol_request_wait_duration_seconds_bucket" and (
                s.labels["flow_schema"] == "queue-fs" and s.labels["execute"] == "true"
            ):
                buckets.append(s.labels["le"])
    assert len(EXPECTED_LABELS) == 30
    missing = sorted(set(EXPECTED_LABELS) - set(labels))
    assert not missing, missing
    for name, expected in EXPECTED_LABELS.items():
        assert labels[name] == expected, name
    assert buckets == WAIT_BUCKETS
    # Proxy metrics ride along.
    assert "gateway_upstream_request_duration_seconds_bucket" in labels


HIDDEN = {"apiserver_flowcontrol_request_concurrency_limit": "1.30.0",
          "apiserver_flowcontrol_request_concurrency_in_use": "1.31.0"}  # fmt: skip


def families(gw: ServerThread) -> dict[str, Any]:
    text = httpx.get(gw.url + "/metrics", headers=ADMIN).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_help_texts_carry_kubernetes_stability_and_deprecated_gauges_are_hidden(
    gw: ServerThread,
) -> None:
    assert httpx.get(gw.url + "/queue/echo").status_code == 200
    fams = families(gw)
    assert not set(HIDDEN) & set(fams)
    stability = {
        "apiserver_flowcontrol_rejected_requests": "[BETA] Number of requests rejected by API "
        "Priority and Fairness subsystem",
        "apiserver_flowcontrol_request_wait_duration_seconds": "[BETA] Length of time a request "
        "spent waiting in its queue",
        "apiserver_flowcontrol_nominal_limit_seats": "[BETA] Nominal number of execution seats "
        "configured for each priority level",
        "apiserver_flowcontrol_current_r": "[ALPHA] R(time of last change)",
        "apiserver_flowcontrol_demand_seats": "[ALPHA] Observations, at the end of every "
        "nanosecond, of (the number of seats each priority level could use) / (nominal number "
        "of seats for that level)",
        "apiserver_current_inflight_requests": "[STABLE] Maximal number of currently used "
        "inflight request limit of this apiserver per request kind in last second.",
    }
    for name, help_text in stability.items():
        assert fams[name].documentation == help_text, name
    for name, fam in fams.items():
        if name.startswith("apiserver_"):
            assert fam.documentation.startswith(("[ALPHA] ", "[BETA] ", "[STABLE] ")), name


def test_hidden_gauges_are_shown_when_asked_for(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = start_gateway(
        {"upstreams": [{"url": upstream.url}], "showHiddenMetricsForVersion": "1.33"}, [CONFIG]
    )
    gateways.append(gw)
    assert httpx.get(gw.url + "/queue/echo").status_code == 200
    fams = families(gw)
    for name, since in HIDDEN.items():
        assert fams[name].documentation.startswith(f"[ALPHA] (Deprecated since {since}) "), name
    limit = fams["apiserver_flowcontrol_request_concurrency_limit"]
    nominal = fams["apiserver_flowcontrol_nominal_limit_seats"]
    assert {tuple(s.labels.items()): s.value for s in limit.samples} == {
        tuple(s.labels.items()): s.value for s in nominal.samples
    }


@pytest.mark.parametrize("version", ["1.32", "1.34", "1.33.0", "yes"])
def test_show_hidden_metrics_takes_only_the_previous_minor_version(version: str) -> None:
    with pytest.raises(ConfigLoadError, match="showHiddenMetricsForVersion"):
        load_config([], {"showHiddenMetricsForVersion": version})


@pytest.mark.parametrize(
    ("path", "query", "limit"),
    [
        ("/api/v1/pods", b"", 15.0),  # request timeout 60 s / 4
        ("/api/v1/pods", b"timeout=8s", 2.0),  # the client's deadline / 4
        # A longer timeout does not extend the deadline (kube's WithRequestDeadline).
        ("/api/v1/pods", b"timeout=10m", 15.0),
        ("/api/v1/pods", b"watch=1&timeout=8s", 15.0),  # watches have no deadline
    ],
)
def test_wait_limit_is_a_quarter_of_the_deadline(path: str, query: bytes, limit: float) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    mw = FlowControlMiddleware(
        app,
        controller=FlowController(
            clock=FakeEventClock(), config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
        ),
    )
    info, _ = RequestInfoParser().parse("GET", path, query)
    assert mw.wait_limit(RequestDigest(ANONYMOUS, info)) == limit
    if not query:
        mw.request_timeout = 600.0
        assert mw.wait_limit(RequestDigest(ANONYMOUS, info)) == 60.0  # never more than a minute


@pytest.mark.parametrize("size", [200_000, 3_000_000])  # below and above the read-ahead cap
def test_queued_request_keeps_its_body(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor, size: int
) -> None:
    running = hold(pool, gw, "/queue/hold/a")
    wait_until(lambda: "a" in holding(upstream))
    body = b"y" * size
    queued = pool.submit(httpx.post, gw.url + "/queue/upload", content=body, timeout=10)
    wait_until(lambda: level_state(gw, "tiny-queue")["waiting"] == 1)
    httpx.get(upstream.url + "/release/a")
    assert running.result().status_code == 200
    r = queued.result()
    assert r.status_code == 200
    assert r.json()["bytes"] == len(body)


def test_a_queued_request_gets_the_pf_headers_once(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    running = hold(pool, gw, "/queue/hold/a")
    wait_until(lambda: "a" in holding(upstream))
    queued = hold(pool, gw, "/queue/echo")
    wait_until(lambda: level_state(gw, "tiny-queue")["waiting"] == 1)
    httpx.get(upstream.url + "/release/a")
    assert running.result().status_code == 200
    r = queued.result()
    assert r.status_code == 200
    assert len(r.headers.get_list("x-kubernetes-pf-flowschema-uid")) == 1
    assert len(r.headers.get_list("x-kubernetes-pf-prioritylevel-uid")) == 1
