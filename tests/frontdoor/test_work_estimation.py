"""Work estimation through a real gateway: rule widths, list sizes learned from proxied
responses, and final seats for mutations that proxied watches will hear about."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.asgi.listcount import SHAPE_BYTES, count_items, looks_like_list
from gateway.asgi.workestimate import GatewayEstimator
from gateway.flowcontrol import debug
from gateway.flowcontrol.digest import RequestInfo
from gateway.http.types import Receive, Scope, Send
from gateway.server import Gateway
from gateway.settings.model import WorkEstimationSettings
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.support.wait import wait_until

ADMIN = {"Authorization": "Bearer admin-token"}
USER = {"Authorization": "Bearer user-token"}


class KubeLikeUpstream:
    """Lists answer with N items (``?items=N``), watches send one event then wait, holds wait."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.watching = 0
        self.held = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        query = dict(p.split("=", 1) for p in scope["query_string"].decode().split("&") if "=" in p)
        ctype = query.get("ctype", "application/json").replace("%2F", "/").encode()
        start = {"type": "http.response.start", "status": 200,
                 "headers": [(b"content-type", ctype)]}  # fmt: skip
        if scope["path"].startswith("/hold"):
            self.held += 1
            await self.release.wait()
            self.held -= 1
            await send(start)
            await send({"type": "http.response.body", "body": b"{}"})
        elif query.get("watch") == "1":
            self.watching += 1
            await send(start)
            await send({"type": "http.response.body", "body": b'{"type":"ADDED"}\n',
                        "more_body": True})  # fmt: skip
            await self.release.wait()
            self.watching -= 1
            await send({"type": "http.response.body", "body": b""})
        elif scope["method"] == "GET":
            n = int(query.get("items", "0"))
            doc: dict[str, Any] = {"kind": query.get("kind", "PodList")}
            doc["items"] = [{"data": "x" * 1000} for _ in range(n)]
            if query.get("kind") == "":
                del doc["kind"]
            await send(start)
            await send({"type": "http.response.body", "body": json.dumps(doc).encode()})
        else:
            await send({**start, "status": 201})
            await send({"type": "http.response.body", "body": b"{}"})


@pytest.fixture
def kube() -> Iterator[ServerThread]:
    server = ServerThread(lambda loop: KubeLikeUpstream()).start()
    yield server
    server.call(server.app.release.set)
    server.stop()


@pytest.fixture
def gw(kube: ServerThread, gateways: list[ServerThread], tmp_path: Path) -> ServerThread:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\nuser-token,alice,2,"dev"\n')
    rules = [{"name": "wide", "path": "/hold/*", "initialSeats": 3}]
    server = start_gateway(
        {
            "upstreams": [{"url": kube.url}],
            "authentication": {"tokenAuthFile": str(tokens)},
            "workEstimation": {"rules": rules},
        },
        clock=lambda loop: FakeEventClock(start=1000.0),
    )
    gateways.append(server)
    return server


def seats(gw: ServerThread, level: str = "global-default") -> int:
    app: Gateway = gw.app
    assert app.controller is not None
    qs = app.controller.levels[level].qs
    return int(gw.call(lambda: qs.tot_seats_in_use))


def metric(gw: ServerThread, name: str, **labels: str) -> float:
    text = httpx.get(gw.url + "/metrics", headers=ADMIN).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"{name} {labels} not found")


def test_a_width_3_request_occupies_3_seats(gw: ServerThread, kube: ServerThread) -> None:
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.get, gw.url + "/hold/1", headers=USER, timeout=10)
        wait_until(lambda: kube.app.held == 1)
        assert seats(gw) == 3
        labels = {"priority_level": "global-default", "flow_schema": "global-default"}
        assert metric(gw, "apiserver_flowcontrol_current_executing_seats", **labels) == 3
        app: Gateway = gw.app
        assert app.controller is not None
        dump = gw.call(lambda: debug.dump_requests(app.controller))  # type: ignore[arg-type]
        row = next(line for line in dump.splitlines() if line.startswith("global-default"))
        assert [c.strip() for c in row.split(",")][6] == "3"  # InitialSeats
        kube.call(kube.app.release.set)
        assert pending.result().status_code == 200
    assert seats(gw) == 0


def _work_seats_sum(gw: ServerThread) -> float:
    labels = {"priority_level": "global-default", "flow_schema": "global-default"}
    try:
        return metric(gw, "apiserver_flowcontrol_work_estimated_seats_sum", **labels)
    except AssertionError:
        return 0.0  # no request classified there yet


def test_a_list_over_a_large_collection_gets_more_seats(gw: ServerThread) -> None:
    base = gw.url + "/api/v1/namespaces/{ns}/pods"
    # Unknown collections cost the minimum; the proxied responses teach the sizes.
    for ns, n in (("big", 5000), ("small", 10)):
        before = _work_seats_sum(gw)
        r = httpx.get(base.format(ns=ns), params={"items": n}, headers=USER, timeout=10)
        assert len(r.json()["items"]) == n
        assert _work_seats_sum(gw) - before == 1
    before = _work_seats_sum(gw)
    httpx.get(base.format(ns="big"), headers=USER, timeout=10)
    big = _work_seats_sum(gw) - before
    before = _work_seats_sum(gw)
    httpx.get(base.format(ns="small"), headers=USER, timeout=10)
    small = _work_seats_sum(gw) - before
    # 5000 x ~1 KB from the watch cache: 1 MB (10 seats), capped by global-default's max
    # seats, min(ceil(0.15 x 49), 49 // 6) = 8; 10 x 1 KB: 1 seat.
    assert (big, small) == (8, 1)


def _list_seats(gw: ServerThread, url: str, **params: Any) -> float:
    before = _work_seats_sum(gw)
    httpx.get(url, params=params, headers=USER, timeout=10)
    return _work_seats_sum(gw) - before


def test_a_collection_is_relearned_once_per_list_learning_interval(gw: ServerThread) -> None:
    url = gw.url + "/api/v1/namespaces/churn/pods"
    app: Gateway = gw.app
    clock: Any = app.clock
    assert _list_seats(gw, url, items=5000) == 1  # unknown yet; this response teaches 5000
    # Within the interval (1 s by default) the next responses are not read: the collection
    # shrank to 10 items, but the estimate still charges for 5000.
    assert _list_seats(gw, url, items=10) == 8
    gw.call(lambda: clock.advance(0.9))
    assert _list_seats(gw, url, items=10) == 8
    gw.call(lambda: clock.advance(0.2))
    assert _list_seats(gw, url, items=10) == 8  # read again: learns 10 items
    assert _list_seats(gw, url, items=10) == 1


def test_mutation_with_watches_holds_final_seats_for_the_additional_latency(
    gw: ServerThread, kube: ServerThread
) -> None:
    url = gw.url + "/api/v1/namespaces/ns/configmaps"
    opened: list[httpx.Response] = []
    clients = [httpx.Client(timeout=10) for _ in range(30)]
    lock = threading.Lock()

    def open_watch(client: httpx.Client) -> None:
        request = client.build_request("GET", url, params={"watch": "1"}, headers=USER)
        response = client.send(request, stream=True)
        with lock:
            opened.append(response)

    try:
        with ThreadPoolExecutor(30) as pool:
            list(pool.map(open_watch, clients))
        wait_until(lambda: kube.app.watching == 30)
        assert seats(gw) == 0  # watches gave their seats back after the first event
        r = httpx.post(url, json={}, headers=USER, timeout=10)
        assert r.status_code == 201
        # 30 interested watches: ceil(30/10) = 3 final seats for 5 ms after the response.
        assert seats(gw) == 3
        app: Gateway = gw.app
        clock: Any = app.clock
        gw.call(lambda: clock.advance(0.004))
        assert seats(gw) == 3
        gw.call(lambda: clock.advance(0.002))
        assert seats(gw) == 0
        labels = {"priority_level": "global-default", "flow_schema": "global-default"}
        assert metric(gw, "apiserver_flowcontrol_watch_count_samples_sum", **labels) == 30
    finally:
        kube.call(kube.app.release.set)
        for response in opened:
            response.close()
        for client in clients:
            client.close()


def test_serve_runs_the_borrowing_adjuster(
    kube: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('user-token,alice,2,"dev"\n')
    gw = start_gateway(
        {
            "upstreams": [{"url": kube.url}],
            "authentication": {"tokenAuthFile": str(tokens)},
            "maxRequestsInflight": 40,
            "maxMutatingRequestsInflight": 20,
        },
        clock=lambda loop: FakeEventClock(start=1000.0),
    )
    gateways.append(gw)
    app: Gateway = gw.app
    assert (
        app.controller is not None
        and app.flow_control is not None
        and app.flow_control.adjuster is not None
        and app.flow_control.adjuster.running
    )
    level = app.controller.levels["global-default"]
    before = int(gw.call(lambda: level.current_cl))
    wanted = before + 6
    with ThreadPoolExecutor(wanted) as pool:
        calls = [
            pool.submit(httpx.get, f"{gw.url}/hold/{i}", headers=USER, timeout=20)
            for i in range(wanted)
        ]
        wait_until(lambda: kube.app.held == before)
        wait_until(lambda: gw.call(lambda: level.qs.tot_requests_waiting) == 6)
        clock: Any = app.clock
        gw.call(lambda: clock.advance(10.0))  # one adjustment period
        after = int(gw.call(lambda: level.current_cl))
        assert after > before  # the busy level borrowed idle levels' lendable seats
        wait_until(lambda: kube.app.held == min(wanted, after))
        kube.call(kube.app.release.set)
        assert all(c.result().status_code == 200 for c in calls)


def test_one_list_response_per_collection_and_interval_is_learned() -> None:
    clock = FakeEventClock()
    estimator = GatewayEstimator(WorkEstimationSettings(), now=clock.now)
    info = RequestInfo(True, "/api/v1/pods", "list", resource="pods")
    assert estimator.should_learn(info)
    clock.advance(0.5)
    assert not estimator.should_learn(info)  # within the 1 s interval
    assert estimator.should_learn(RequestInfo(True, "/api/v1/nodes", "list", resource="nodes"))
    clock.advance(0.6)
    assert estimator.should_learn(info)


@pytest.mark.parametrize(
    "params",
    [
        {"kind": ""},  # {"items": [...]}: JSON with items, not a Kubernetes List
        {"kind": "Pod"},
        {"ctype": "application/x-ndjson"},  # a List, but not application/json
        {"items": 9000},  # 9 MB: over listLearningMaxBytes (8 MiB)
    ],
)
def test_only_kubernetes_lists_within_the_cap_are_learned_from(
    gw: ServerThread, params: dict[str, Any]
) -> None:
    # Issue 21 item 9: any JSON body with "items" (up to 16 MiB) was parsed to learn from.
    url = gw.url + "/api/v1/namespaces/odd/pods"
    assert _list_seats(gw, url, **{"items": 5000, **params}) == 1  # unknown yet
    app: Gateway = gw.app
    clock: Any = app.clock
    gw.call(lambda: clock.advance(1.1))  # the next response is read again
    assert _list_seats(gw, url, items=5000) == 1  # nothing learned from the first one
    assert _list_seats(gw, url, items=10) == 8  # the List of 5000 was


@pytest.mark.parametrize(
    ("body", "counted"),
    [
        (b'{"kind":"PodList","metadata":{"remainingItemCount":5},"items":[{"a":[1]},2]}', (2, 5)),
        (b' {\n "kind" : "ConfigMapList" , "items" : [ ] } ', (0, 0)),
        (b'{"items":[1,2]}', None),
        (b'{"kind":"Pod","items":[1]}', None),
        (b'{"kind":"PodList","items":[1,]}', None),
        (b'{"kind":"PodList","items":[1]} {}', None),
        (b'{"kind":"PodList","items":[1]', None),
        (b'{"kind":"PodList","items":{}}', None),
        (b"\xff", None),
    ],
)
def test_list_items_are_counted_one_at_a_time(body: bytes, counted: tuple[int, int] | None) -> None:
    assert count_items(body) == counted
    if counted is not None:  # what is counted passed the shape check first
        assert looks_like_list(body[:SHAPE_BYTES])


def test_only_a_body_starting_like_a_list_is_kept() -> None:
    assert looks_like_list(b'{"kind":"PodList","apiVersion":"v1","metadata":{}')
    assert not looks_like_list(b'{"kind":"Pod","apiVersion":"v1"')
    assert not looks_like_list(b'{"items":[{"kind":"PodList"}]}')
    assert not looks_like_list(b'["kind","PodList"]')
