"""APF disabled: kube-apiserver's max-in-flight filter, and the health probes."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway.asgi.maxinflight import MaxInFlightMiddleware
from gateway.server import Gateway
from gateway.settings.sources import load_config
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, holding, start_gateway
from tests.support.wait import wait_until


def test_separate_read_and_mutating_limits(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = start_gateway({
        "upstreams": [{"url": upstream.url}], "enablePriorityAndFairness": False,
        "maxRequestsInflight": 1, "maxMutatingRequestsInflight": 1,
    })  # fmt: skip
    gateways.append(gw)
    with ThreadPoolExecutor(2) as pool:
        reading = pool.submit(httpx.get, gw.url + "/hold/r", timeout=10)
        wait_until(lambda: "r" in holding(upstream))
        r = httpx.get(gw.url + "/echo")
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert r.text == "Too many requests, please try again later.\n"
        assert httpx.post(gw.url + "/echo").status_code == 200  # mutating limit is separate
        # Long-running requests are not counted.
        assert httpx.get(gw.url + "/api/v1/namespaces/n/pods/p/log").status_code == 200
        httpx.get(upstream.url + "/release/r")
        assert reading.result().status_code == 200
    assert httpx.get(gw.url + "/echo").status_code == 200
    metrics = httpx.get(gw.url + "/metrics").text
    assert 'gateway_maxinflight_rejected_requests_total{request_kind="readOnly"} 1.0' in metrics
    assert 'apiserver_current_inflight_requests{request_kind="readOnly"}' in metrics


def test_health_probes_answered_while_saturated_and_readyz_flips_on_drain(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = start_gateway({
        "upstreams": [{"url": upstream.url}], "enablePriorityAndFairness": False,
        "maxRequestsInflight": 1,
    })  # fmt: skip
    gateways.append(gw)
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(httpx.get, gw.url + "/hold/h", timeout=10)
        wait_until(lambda: "h" in holding(upstream))
        for probe in ("/healthz", "/livez", "/readyz"):
            r = httpx.get(gw.url + probe)
            assert (r.status_code, r.text) == (200, "ok")
        app: Gateway = gw.app
        gw.call(app.begin_drain)
        assert httpx.get(gw.url + "/readyz").status_code == 503
        assert httpx.get(gw.url + "/livez").status_code == 200
        httpx.get(upstream.url + "/release/h")
        busy.result()


# requestTimeout with APF off: kube-apiserver's WithTimeoutForNonLongRunningRequests runs on
# the max-in-flight path too. The gateway's clock is fake: only advancing it passes a deadline.

TIMEOUT_STATUS = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "Timeout: request did not complete within the allotted timeout",
    "reason": "Timeout", "code": 504,
}  # fmt: skip


@pytest.fixture
def limited(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> Iterator[ServerThread]:
    """APF off, one read-only request in flight at a time, a fake clock from 1000 s."""
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\nuser-token,alice,2,"dev"\n')
    gw = start_gateway(
        {
            "upstreams": [{"url": upstream.url}], "enablePriorityAndFairness": False,
            "maxRequestsInflight": 1, "maxMutatingRequestsInflight": 1,
            "authentication": {"tokenAuthFile": str(tokens)},
        },
        clock=lambda loop: FakeEventClock(start=1000.0),
    )  # fmt: skip
    gateways.append(gw)
    yield gw


def in_flight(gw: ServerThread) -> int:
    limiter = gw.app.admission
    assert isinstance(limiter, MaxInFlightMiddleware)
    return int(gw.call(lambda: limiter.inflight["readOnly"].current))


def advance(gw: ServerThread, seconds: float) -> None:
    clock: FakeEventClock = gw.app.clock
    gw.call(lambda: clock.advance(seconds))


def test_request_timeout_bounds_an_executing_request_with_apf_off(
    limited: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    """Past requestTimeout (60 s) a request gets kube's 504 Status, its upstream request is
    abandoned and its in-flight slot goes back (on main nothing ends it: the result times
    out)."""
    slow = pool.submit(httpx.get, limited.url + "/hold/d1", timeout=10)
    wait_until(lambda: "d1" in holding(upstream))
    advance(limited, 59.0)
    assert not slow.done() and in_flight(limited) == 1
    assert httpx.get(limited.url + "/echo").status_code == 429  # the one slot is taken
    advance(limited, 2.0)
    r = slow.result(timeout=5)
    assert r.status_code == 504 and r.json() == TIMEOUT_STATUS
    assert in_flight(limited) == 0  # given back before the 504 was sent
    assert httpx.get(limited.url + "/echo").status_code == 200
    wait_until(lambda: "d1" not in holding(upstream), what="the upstream request abandoned")


def test_a_shorter_timeout_parameter_is_the_deadline_with_apf_off(
    limited: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    slow = pool.submit(httpx.get, limited.url + "/api/v1/namespaces/ns/hold/d2?timeout=5s",
                       timeout=10)  # fmt: skip
    wait_until(lambda: "d2" in holding(upstream))
    advance(limited, 4.0)
    assert not slow.done()
    advance(limited, 2.0)
    assert slow.result(timeout=5).json() == TIMEOUT_STATUS
    assert in_flight(limited) == 0


def test_privileged_requests_are_not_counted_but_bounded(
    limited: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    """system:masters skips the in-flight limit, not the timeout filter (kube's chain)."""
    admin = {"Authorization": "Bearer admin-token"}
    slow = pool.submit(httpx.get, limited.url + "/hold/d3", headers=admin, timeout=10)
    wait_until(lambda: "d3" in holding(upstream))
    assert in_flight(limited) == 0
    advance(limited, 61.0)
    assert slow.result(timeout=5).json() == TIMEOUT_STATUS


def test_long_running_requests_have_no_deadline_with_apf_off(
    limited: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    # pods/<name>/log: long-running; the upstream holds it under the key "log".
    logs = pool.submit(httpx.get, limited.url + "/api/v1/namespaces/ns/pods/hold/log",
                       timeout=10)  # fmt: skip
    wait_until(lambda: "log" in holding(upstream))
    advance(limited, 600.0)
    assert not logs.done()
    httpx.get(upstream.url + "/release/log")
    assert logs.result(timeout=5).status_code == 200


def test_a_response_under_way_at_its_deadline_has_its_connection_closed_with_apf_off(
    limited: ServerThread, upstream: ServerThread
) -> None:
    with httpx.stream("GET", limited.url + "/stream/1", timeout=5) as r:
        lines = r.iter_lines()
        assert r.status_code == 200 and next(lines) == "chunk0"
        advance(limited, 61.0)
        with pytest.raises(httpx.RemoteProtocolError):
            list(lines)  # the chunked body never ends: the connection is closed
    assert in_flight(limited) == 0
    httpx.get(upstream.url + "/release/stream")


def test_a_reload_changes_request_timeout_for_new_requests_with_apf_off(
    upstream: ServerThread, gateways: list[ServerThread], pool: ThreadPoolExecutor
) -> None:
    overrides = {"upstreams": [{"url": upstream.url}], "enablePriorityAndFairness": False}
    gw = start_gateway(overrides, clock=lambda loop: FakeEventClock(start=1000.0))
    gateways.append(gw)
    app: Gateway = gw.app
    commit = app.prepare(load_config([], {**overrides, "requestTimeout": "5s"}))
    gw.call(commit)
    slow = pool.submit(httpx.get, gw.url + "/hold/d5", timeout=10)
    wait_until(lambda: "d5" in holding(upstream))
    advance(gw, 6.0)
    assert slow.result(timeout=5).json() == TIMEOUT_STATUS
    limiter = app.admission
    assert isinstance(limiter, MaxInFlightMiddleware)
    with pytest.raises(ValueError, match="request_timeout"):
        limiter.prepare(max_requests_inflight=1, max_mutating_requests_inflight=1,
                        status_body=False, request_timeout=0.0)  # fmt: skip
