"""Work estimation: Kubernetes' width_test examples, watch counting, rules, adaptive seats."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.digest import RequestDigest, RequestInfo, UserInfo, WorkEstimate
from gateway.flowcontrol.workestimate import (
    AdaptiveEstimator,
    EstimatorConfig,
    ObjectCountTracker,
    RequestView,
    RuleMatch,
    WorkEstimator,
    WorkRule,
)

USER = UserInfo("alice", ("system:authenticated",))


def digest(
    verb: str, resource: str = "pods", namespace: str = "", name: str = "", **query: str
) -> RequestDigest:
    path = f"/api/v1/namespaces/{namespace}/{resource}" if namespace else f"/api/v1/{resource}"
    info = RequestInfo(
        True, path, verb, api_prefix="api", api_version="v1", namespace=namespace,
        resource=resource, name=name, query=tuple(query.items()),
    )  # fmt: skip
    return RequestDigest(USER, info)


def estimator(**kwargs: object) -> WorkEstimator:
    return WorkEstimator(now=lambda: 0.0, **kwargs)  # type: ignore[arg-type]


def test_list_from_storage_with_limit() -> None:
    e = estimator()
    e.observe_list(digest("list"), 699, 699 * 10_000)
    work = e.estimate(digest("list", resourceVersion="1", limit="399"), 0).work
    assert work == WorkEstimate(40)


def test_list_from_cache_is_capped_by_cache_memory() -> None:
    e = estimator()
    e.observe_list(digest("list"), 699, 699 * 10_000)
    assert e.estimate(digest("list", resourceVersion="1"), 0).work.initial_seats == 10


@pytest.mark.parametrize(
    ("query", "seats"),
    [
        # Kubernetes' width_test: only a watch that asks for its initial events pays for them.
        ({}, 1),
        ({"resourceVersion": "0"}, 1),
        ({"resourceVersion": "1"}, 1),
        ({"sendInitialEvents": "false"}, 1),
        ({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, 8),
        ({"sendInitialEvents": "true", "resourceVersion": "1"}, 8),
        # kube's bool rule: anything but 0/false (any case) is true, the empty value too.
        ({"sendInitialEvents": ""}, 8),
        ({"sendInitialEvents": "1"}, 8),
        ({"sendInitialEvents": "yes"}, 8),
        ({"sendInitialEvents": "FALSE"}, 1),
        ({"sendInitialEvents": "0"}, 1),
    ],
)
def test_watch_pays_for_a_list_only_with_send_initial_events(
    query: dict[str, str], seats: int
) -> None:
    e = estimator()
    e.observe_list(digest("list"), 799, 799 * 1_000)
    assert e.estimate(digest("watch", **query), 0).work.initial_seats == seats


def test_watch_list_through_the_request_info_parser_pays_the_list_cost() -> None:
    """``sendInitialEvents`` survives request-info parsing (it is a kept query parameter)."""
    e = estimator()
    e.observe_list(digest("list"), 799, 799 * 1_000)
    query = b"watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=7"
    info, long_running = RequestInfoParser().parse("GET", "/api/v1/pods", query)
    assert info.verb == "watch" and long_running
    assert e.estimate(RequestDigest(USER, info, long_running), 0).work.initial_seats == 8


def test_unknown_collection_gets_minimum_seats() -> None:
    assert estimator().estimate(digest("list", resource="widgets"), 0).work.initial_seats == 1


def test_large_collection_costs_more_than_small_and_namespaces_are_separate() -> None:
    e = estimator()
    e.observe_list(digest("list", namespace="big"), 5000, 5000 * 2_000)
    e.observe_list(digest("list", namespace="small"), 20, 20 * 2_000)
    big = e.estimate(digest("list", namespace="big", resourceVersion="1", limit="5000"), 0)
    small = e.estimate(digest("list", namespace="small", resourceVersion="1", limit="5000"), 0)
    assert big.work.initial_seats == 100
    assert small.work.initial_seats == 1


def test_list_seats_capped_by_level() -> None:
    e = estimator()
    e.observe_list(digest("list"), 5000, 5000 * 2_000)
    assert e.estimate(digest("list", resourceVersion="1", limit="5000"), 8).work.initial_seats == 8


def test_count_based_formula() -> None:
    e = estimator(config=EstimatorConfig(size_based=False, maximum_list_seats=10))
    e.observe_list(digest("list"), 699, 1)
    assert e.estimate(digest("list", resourceVersion="1", limit="399"), 0).work.initial_seats == 8
    assert e.estimate(digest("list"), 0).work.initial_seats == 7


def test_single_object_list_costs_one_object() -> None:
    e = estimator()
    e.observe_list(digest("list"), 699, 699 * 1_000_000)
    assert (
        e.estimate(digest("list", name="p1", resourceVersion="1", limit="10"), 0).work.initial_seats
        == 10
    )


@pytest.mark.parametrize(
    ("watches", "cap", "final", "latency"),
    [(29, 10, 3, 0.005), (5, 10, 0, 0.0), (199, 10, 10, 0.010), (1000, 10, 10, 0.050)],
)
def test_mutating_requests_pay_for_interested_watches(
    watches: int, cap: int, final: int, latency: float
) -> None:
    e = estimator()
    for _ in range(watches):
        assert e.watches.register(digest("watch", namespace="ns").info)
    est = e.estimate(digest("create", namespace="ns"), cap)
    assert est.work.initial_seats == 1
    assert est.work.final_seats == final
    assert est.work.additional_latency == pytest.approx(latency)
    assert est.watch_count == watches


def test_watch_scopes_and_node_selector_exception() -> None:
    e = estimator()
    cluster = digest("watch").info
    e.watches.register(cluster)
    e.watches.register(digest("watch", namespace="a").info)
    e.watches.register(digest("watch", namespace="a", name="p").info)
    assert not e.watches.register(digest("watch", fieldSelector="spec.nodeName=node1").info)
    assert e.watches.interested(digest("update", namespace="a", name="p").info) == 3
    assert e.watches.interested(digest("update", namespace="b", name="p").info) == 1
    assert e.watches.interested(digest("get", namespace="a", name="p").info) == 0
    e.watches.forget(cluster)
    assert e.watches.interested(digest("update", namespace="b", name="p").info) == 0


def test_rules_match_method_path_header_query() -> None:
    rule = WorkRule(
        "reports",
        RuleMatch(
            methods=("POST",), path="/v2/{namespace}/reports/{name}", headers=(("x-full", "1"),)
        ),
        WorkEstimate(4, 2, 0.05),
    )
    e = estimator(rules=[rule], kubernetes=False)
    d = RequestDigest(USER, RequestInfo(False, "/v2/ns/reports/r1", "post"))
    hit = RequestView("POST", "/v2/ns/reports/r1", {"x-full": "1"}, {})
    assert e.estimate(d, 0, hit).work == WorkEstimate(4, 2, 0.05)
    miss = RequestView("POST", "/v2/ns/reports/r1", {}, {})
    assert e.estimate(d, 0, miss).work == WorkEstimate(1)
    assert RuleMatch(path="/static/*").matches("GET", "/static/a/b.css", {}, {})
    assert not RuleMatch(path="/static/*").matches("GET", "/staticx", {}, {})
    assert RuleMatch(query=(("full", "1"),)).matches("GET", "/x", {}, {"full": "1"})


def test_adaptive_estimator_learns_route_cost() -> None:
    adaptive = AdaptiveEstimator(seat_time=0.1, maximum=10, smoothing=0.5)
    rule = WorkRule("slow", RuleMatch(path="/slow"), WorkEstimate(1), adaptive=True)
    e = estimator(rules=[rule], adaptive=adaptive, kubernetes=False)
    d = RequestDigest(USER, RequestInfo(False, "/slow", "get"))
    view = RequestView("GET", "/slow")
    first = e.estimate(d, 0, view)
    assert first.work.initial_seats == 1 and first.route == "slow"
    for _ in range(10):
        adaptive.observe("slow", 0.4)
    assert e.estimate(d, 0, view).work.initial_seats == 4
    adaptive.observe("slow", 10.0)
    assert e.estimate(d, 0, view).work.initial_seats == 10


def test_object_count_tracker_falls_back_expires_and_reads_the_clock_only_when_found() -> None:
    reads: list[float] = []

    def clock(at: float) -> Callable[[], float]:
        def now() -> float:
            reads.append(at)
            return at

        return now

    t = ObjectCountTracker(ttl=10.0)
    assert t.get("pods", "a", clock(0.0)) is None
    assert reads == []  # nothing learned for the resource: no clock read
    t.observe("pods", "", 100, 1000, 0.0)
    t.observe("pods", "a", 5, 50, 1.0)
    t.observe("deployments.apps", "a", 7, 70, 1.0)
    assert len(t) == 3
    assert t.get("configmaps", "a", clock(0.0)) is None and reads == []
    found = t.get("pods", "a", clock(2.0))
    assert found is not None and found.count == 5
    found = t.get("pods", "b", clock(2.0))  # no namespace count: the cluster-wide one
    assert found is not None and found.count == 100
    assert t.get("pods", "a", clock(11.5)) is None  # expired, and no fallback then
    assert t.get("pods", "b", clock(10.5)) is None
    found = t.get("deployments.apps", "", clock(2.0))
    assert found is None  # a namespace's count is no cluster-wide count
    assert reads == [2.0, 2.0, 11.5, 10.5]


@pytest.mark.parametrize(
    ("verb", "query"),
    [
        ("list", {"limit": "invalid"}),
        ("list", {"timeoutSeconds": "1.5"}),
        ("list", {"limit": "99999999999999999999"}),
        ("watch", {"limit": "x"}),  # decoded before the watch check, as in Kubernetes
    ],
)
def test_undecodable_list_options_get_the_maximum_seats(verb: str, query: dict[str, str]) -> None:
    e = estimator()
    # Even for a collection never seen (otherwise the minimum): the request cannot succeed.
    assert e.estimate(digest(verb, resource="widgets", **query), 0).work.initial_seats == 100
    assert e.estimate(digest(verb, resource="widgets", **query), 8).work.initial_seats == 8
