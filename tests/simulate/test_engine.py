"""Scenarios in virtual time through the real controller: determinism, both client loops,
saturation, exemption, fairness, borrowing."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apfconfig import bootstrap
from gateway.apfconfig.configset import ConfigSet
from gateway.apfconfig.loader import load_paths
from gateway.simulate import SimulationError, parse_traffic, simulate, to_json
from tests.simulate.helpers import STRICT

# Fairness margin, relative to the max-min fair share (Kubernetes' scenarios use 1-3%).
MARGIN = 0.03


def run(data: dict[str, Any], config: ConfigSet | None = None, seed: int | None = None) -> Any:
    traffic = parse_traffic(data, "test.yaml")
    return to_json(simulate(traffic, config or bootstrap.defaults(), seed=seed))


def client(name: str, user: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "user": user,
        "verb": "list",
        "path": f"/api/v1/namespaces/{name}/pods",
    }
    base.update(fields)
    return base


def mixed() -> dict[str, Any]:
    return {
        "duration": "30s",
        "clients": [
            client("elephant", "alice", threads=8, serviceTime="1s", thinkTime="1s"),
            client("mouse", "bob", verb="get", rate="4/s", serviceTime="100ms"),
        ],
    }


def test_same_seed_same_results_and_the_seed_matters() -> None:
    first, second = run(mixed()), run(mixed())
    assert first == second
    other = run(mixed(), seed=2)
    assert other["seed"] == 2
    # The Poisson mouse arrives at other instants with another seed.
    assert other["clients"]["mouse"] != first["clients"]["mouse"]
    assert other["clients"]["elephant"]["dispatched"] == first["clients"]["elephant"]["dispatched"]
    # Another client in front changes nobody else's arrivals.
    extended = mixed()
    extended["clients"].insert(0, client("newcomer", "carol", rate="1/s", serviceTime="10ms"))
    assert run(extended)["clients"]["mouse"]["calls"] == first["clients"]["mouse"]["calls"]


def test_closed_loop_threads_calls_service_and_think_time() -> None:
    data = {
        "duration": "60s",
        "clients": [
            client("batch", "alice", threads=4, calls=5, serviceTime="2s", thinkTime="1s"),
        ],
    }
    c = run(data)["clients"]["batch"]
    assert c["mode"] == "closed"
    assert c["flowSchema"] == "global-default"  # authenticated users land where kubectl would
    assert c["priorityLevel"] == "global-default"
    assert c["calls"] == c["dispatched"] == 20
    assert c["waitP50"] == c["waitP99"] == 0.0
    # 20 calls x 2 s x 1 seat over 60 s, whatever the concurrency.
    assert c["avgExecutingSeats"] == pytest.approx(20 * 2 / 60)
    assert c["demandSeats"] == pytest.approx(20 * 2 / 60)


def test_closed_loop_until_the_end_and_start_stop_window() -> None:
    data = {
        "duration": "20s",
        "clients": [
            client("steady", "alice", threads=2, serviceTime="1s", thinkTime="1s"),
            client("burst", "bob", threads=3, serviceTime="500ms", start="5s", stop="10s"),
        ],
    }
    out = run(data)["clients"]
    assert out["steady"]["calls"] == 20  # one call every 2 s per thread for 20 s
    assert out["steady"]["avgExecutingSeats"] == pytest.approx(1.0)
    assert out["burst"]["calls"] == 30  # 3 threads back to back, 5 s of 0.5 s calls
    assert out["burst"]["avgExecutingSeats"] == pytest.approx(3 * 5 / 20)


def test_open_loop_poisson_and_uniform_arrivals() -> None:
    data = {
        "duration": "100s",
        "clients": [
            client("poisson", "alice", verb="get", rate="10/s", serviceTime="50ms"),
            client("uniform", "bob", verb="get", rate="30/m", serviceTime="1s", arrival="uniform"),
        ],
    }
    out = run(data)["clients"]
    assert out["poisson"]["mode"] == "open"
    assert out["poisson"]["verb"] == "get"
    # 1000 expected; a Poisson count's standard deviation is sqrt(1000) ~ 32.
    assert 850 < out["poisson"]["calls"] < 1150
    assert out["poisson"]["dispatched"] == out["poisson"]["calls"]
    assert out["uniform"]["calls"] == 50
    assert out["uniform"]["avgExecutingSeats"] == pytest.approx(0.5, abs=0.011)


def test_saturated_level_rejects_while_exempt_client_is_unaffected(
    tenants_config: ConfigSet,
) -> None:
    data = {
        "duration": "30s",
        "serverConcurrencyLimit": 100,
        "waitLimit": "2s",
        "clients": [
            client("flood", "alice", threads=1000, serviceTime="1s"),
            client("admin", "root", groups=["system:masters"], threads=20, serviceTime="1s"),
        ],
    }
    out = run(data, tenants_config)
    flood, admin = out["clients"]["flood"], out["clients"]["admin"]
    assert flood["priorityLevel"] == "tenants"
    assert flood["rejected"]["queue-full"] > 0
    assert flood["rejected"]["time-out"] > 0
    assert flood["avgExecutingSeats"] == pytest.approx(95, rel=0.02)
    assert admin["flowSchema"] == "exempt" and admin["priorityLevel"] == "exempt"
    assert admin["rejected"] == {"queue-full": 0, "concurrency-limit": 0, "time-out": 0}
    assert admin["calls"] == admin["dispatched"] == 20 * 30
    assert admin["waitP99"] == 0.0
    assert admin["avgExecutingSeats"] == pytest.approx(20.0)
    tenants = out["levels"]["tenants"]
    assert tenants["rejected"]["queue-full"] == flood["rejected"]["queue-full"]
    assert tenants["dispatched"] == flood["dispatched"]


def test_reject_level_rejects_with_concurrency_limit() -> None:
    config = load_paths([STRICT])
    data = {
        "duration": "20s",
        "serverConcurrencyLimit": 100,
        "clients": [client("scrape", "scraper", threads=100, serviceTime="1s")],
    }
    out = run(data, config)
    scrape = out["clients"]["scrape"]
    level = out["levels"]["strict"]
    assert scrape["priorityLevel"] == "strict"
    assert level["type"] == "Limited/Reject"
    # ceil(100 * 10 / (10 + 5 catch-all)) = 67 seats, never more.
    assert level["nominalCL"] == 67
    assert scrape["rejected"]["concurrency-limit"] > 0
    assert scrape["rejected"]["queue-full"] == scrape["rejected"]["time-out"] == 0
    assert scrape["waitP99"] == 0.0
    assert scrape["avgExecutingSeats"] <= 67


def test_two_equal_elephants_split_the_level_and_a_mouse_gets_its_demand(
    tenants_config: ConfigSet,
) -> None:
    data = {
        "duration": "60s",
        "serverConcurrencyLimit": 100,
        "clients": [
            client("e1", "alice", threads=100, serviceTime="1s"),
            client("e2", "bob", threads=100, serviceTime="1s"),
            client(
                "mouse", "carol", verb="get", rate="5/s", arrival="uniform", serviceTime="500ms"
            ),
        ],
    }
    out = run(data, tenants_config)
    assert out["levels"]["tenants"]["nominalCL"] == 95
    e1, e2, mouse = (out["clients"][n] for n in ("e1", "e2", "mouse"))
    assert mouse["demandSeats"] == pytest.approx(2.5)
    assert mouse["fairShare"] == pytest.approx(2.5)  # below the equal split: gets its demand
    assert e1["fairShare"] == e2["fairShare"] == pytest.approx((95 - 2.5) / 2)
    for c in (e1, e2, mouse):
        assert c["avgExecutingSeats"] == pytest.approx(c["fairShare"], rel=MARGIN)
    assert sum(c["avgExecutingSeats"] for c in (e1, e2, mouse)) <= 95


def test_replicas_are_separate_flows_and_each_mouse_gets_its_demand(
    tenants_config: ConfigSet,
) -> None:
    data = {
        "duration": "60s",
        "serverConcurrencyLimit": 100,
        "clients": [
            client("elephant", "alice", threads=200, serviceTime="1s"),
            client(
                "mice",
                "user-{i}",
                path="/api/v1/namespaces/ns-{i}/pods/p",
                verb="get",
                replicas=20,
                rate="1/s",
                arrival="uniform",
                serviceTime="1s",
            ),
        ],
    }
    out = run(data, tenants_config)
    elephant, mice = out["clients"]["elephant"], out["clients"]["mice"]
    assert (mice["replicas"], mice["flows"]) == (20, 20)  # ByUser: one flow per user-{i}
    assert mice["calls"] == mice["dispatched"] == 20 * 60
    assert mice["demandSeats"] == mice["fairShare"] == pytest.approx(20.0)
    assert elephant["fairShare"] == pytest.approx(95 - 20)
    for c in (elephant, mice):
        assert c["avgExecutingSeats"] == pytest.approx(c["fairShare"], rel=MARGIN)
    assert out["levels"]["tenants"]["clients"] == ["elephant", "mice"]


def test_fair_share_follows_clients_arriving_mid_run(tenants_config: ConfigSet) -> None:
    data = {
        "duration": "60s",
        "serverConcurrencyLimit": 100,
        "clients": [
            client("early", "alice", threads=100, serviceTime="1s"),
            client("late", "bob", threads=100, serviceTime="1s", start="30s"),
        ],
    }
    out = run(data, tenants_config)["clients"]
    early, late = out["early"], out["late"]
    # Alone for 30 s (all 95 seats), then half each for 30 s.
    assert early["fairShare"] == pytest.approx((95 * 30 + 47.5 * 30) / 60)
    assert late["fairShare"] == pytest.approx(47.5 * 30 / 60)
    assert late["demandSeats"] == pytest.approx(50.0)
    for c in (early, late):
        assert c["avgExecutingSeats"] == pytest.approx(c["fairShare"], rel=MARGIN)


def test_limits_per_adjustment_period_show_borrowing() -> None:
    data = {
        "duration": "60s",
        "clients": [client("hog", "alice", threads=200, serviceTime="1s")],
    }
    out = run(data)
    level = out["levels"]["global-default"]
    limits = level["limits"]
    assert [entry["time"] for entry in limits] == [10, 20, 30, 40, 50, 60]
    keys = {
        "time",
        "nominalCL",
        "lowerCL",
        "upperCL",
        "currentCL",
        "demandAvg",
        "demandStdev",
        "demandHighWatermark",
        "smoothed",
        "target",
    }
    assert all(keys <= entry.keys() for entry in limits)
    assert limits[0]["demandHighWatermark"] >= 200 - 1
    # Nobody else asks for seats, so the busy level borrows far beyond its nominal 49.
    assert limits[0]["currentCL"] > level["nominalCL"] * 2
    hog = out["clients"]["hog"]
    assert hog["avgExecutingSeats"] > level["nominalCL"] * 2
    assert level["avgCL"] > level["nominalCL"] * 2
    # An idle lender lent: below its nominal limit, not below its lower bound.
    idle = out["levels"]["workload-low"]
    assert idle["lowerCL"] <= idle["limits"][-1]["currentCL"] < idle["nominalCL"]


def test_seats_are_capped_at_the_level_maximum_and_final_seats_kept() -> None:
    data = {
        "duration": "10s",
        "clients": [
            client(
                "wide",
                "alice",
                verb="create",
                threads=1,
                serviceTime="1s",
                seats=50,
                finalSeats=3,
                additionalLatency="200ms",
            ),
        ],
    }
    out = run(data)
    wide = out["clients"]["wide"]
    assert wide["verb"] == "create"
    assert wide["seats"] == out["levels"]["global-default"]["maxSeats"] == 8
    assert wide["finalSeats"] == 3 and wide["additionalLatency"] == 0.2
    assert wide["avgExecutingSeats"] == pytest.approx(8.0)


def test_long_running_requests_are_refused_with_the_client_name() -> None:
    data = {
        "duration": "10s",
        "clients": [
            {
                "name": "shell",
                "user": "alice",
                "verb": "create",
                "path": "/api/v1/namespaces/a/pods/p/exec",
                "threads": 1,
                "serviceTime": "1s",
            }
        ],
    }
    with pytest.raises(SimulationError, match=r'client "shell".*long-running'):
        run(data)


def test_non_resource_requests_are_classified_by_path() -> None:
    data = {
        "duration": "10s",
        "clients": [
            {
                "name": "probe",
                "user": "kubelet",
                "verb": "get",
                "path": "/healthz",
                "rate": "1/s",
                "serviceTime": "10ms",
            }
        ],
    }
    assert run(data)["clients"]["probe"]["flowSchema"] == "probes"


def test_watch_is_simulated_and_runaway_traffic_is_refused() -> None:
    data = {
        "duration": "10s",
        "clients": [client("watcher", "alice", verb="watch", threads=2, serviceTime="5s")],
    }
    watcher = run(data)["clients"]["watcher"]
    assert watcher["verb"] == "watch" and watcher["dispatched"] == 4
    data = {
        "duration": "1h",
        "clients": [client("typo", "alice", verb="get", rate="5000/s", serviceTime="1ms")],
    }
    with pytest.raises(SimulationError, match=r"about 18,000,000 requests"):
        run(data)
    # Counted before any copy or thread exists.
    data = {
        "duration": "1s",
        "clients": [client("many", "u-{i}", threads=1000, replicas=10_000, serviceTime="1s")],
    }
    with pytest.raises(SimulationError, match=r"about 10,000,000 requests"):
        run(data)
