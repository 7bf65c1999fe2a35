"""APF disabled: kube-apiserver's max-in-flight filter, and the health probes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from gateway.server import Gateway
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
