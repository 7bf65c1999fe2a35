"""The traffic format: units, defaults, and an error naming file and field for each mistake."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gateway.simulate import TrafficError, load_traffic, parse_traffic
from gateway.simulate.units import parse_duration, parse_rate
from tests.simulate.helpers import write_traffic


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("100ms", 0.1),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("250us", 0.00025),
        (2, 2.0),
        (0.5, 0.5),
        ("3", 3.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10 parsecs", "1d", "-1s", "5s5", True, None, "nan"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("2/s", 2.0), ("30/m", 0.5), ("5/10s", 0.5), ("7200/h", 2.0), ("1/100ms", 10.0), (3, 3.0)],
)
def test_rates(text: object, rate: float) -> None:
    assert parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize("text", ["2 per s", "/s", "2/", "2/0s", "x/s", "-2/s", False])
def test_bad_rates(text: object) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


def minimal(**client: Any) -> dict[str, Any]:
    base = {"name": "c", "user": "u", "verb": "get", "path": "/api/v1/pods", "serviceTime": "1s"}
    base.update(client)
    return {"duration": "10s", "clients": [base]}


def test_defaults() -> None:
    traffic = parse_traffic(minimal(threads=2), "t.yaml")
    assert traffic.duration == 10.0
    assert traffic.seed == 1
    assert traffic.server_concurrency_limit == 600
    assert traffic.wait_limit == 15.0
    c = traffic.clients[0]
    assert c.closed_loop and c.threads == 2 and c.calls is None
    assert (c.seats, c.final_seats, c.additional_latency) == (1, 0, 0.0)
    assert (c.start, c.stop, c.wait_limit) == (0.0, 10.0, 15.0)
    assert c.method == "GET" and c.groups == () and c.replicas == 1


def test_method_instead_of_verb_and_clipped_stop() -> None:
    data = minimal(method="post", rate="1/s", stop="1h")
    del data["clients"][0]["verb"]
    traffic = parse_traffic(data, "t.yaml")
    c = traffic.clients[0]
    assert (c.verb, c.method, c.stop) == ("", "POST", 10.0)
    assert not c.closed_loop and math.isclose(c.rate, 1.0)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"rate": "2 per s"}, 't.yaml: clients[0].rate (client "c"): expected a rate like 2/s'),
        ({"threads": 2, "rate": "1/s"}, 'clients[0].threads (client "c"): give either threads'),
        ({}, 'clients[0].threads (client "c"): give either threads'),
        ({"threads": 0}, 'clients[0].threads (client "c"): must be at least 1; got 0'),
        ({"threads": 1, "sevriceTime": "1s"}, 'clients[0].sevriceTime (client "c"): unknown field'),
        (
            {"threads": 1, "serviceTime": "0s"},
            'clients[0].serviceTime (client "c"): must be a positive',
        ),
        ({"threads": 1, "seats": 1.5}, 'clients[0].seats (client "c"): expected an integer'),
        ({"threads": 1, "path": "api/v1"}, 'clients[0].path (client "c"): expected a path'),
        ({"threads": 1, "verb": "LIST"}, 'clients[0].verb (client "c"): expected a lowercase verb'),
        ({"threads": 1, "groups": "admins"}, 'clients[0].groups (client "c"): expected a list'),
        ({"rate": "1/s", "thinkTime": "1s"}, 'clients[0].thinkTime (client "c"): only for closed'),
        ({"threads": 1, "arrival": "poisson"}, 'clients[0].arrival (client "c"): only for open'),
        (
            {"rate": "1/s", "arrival": "bursty"},
            'clients[0].arrival (client "c"): expected "poisson"',
        ),
        ({"threads": 1, "start": "20s"}, 'clients[0].start (client "c"): must be before stop'),
        ({"threads": 1, "user": None}, 'clients[0].user (client "c"): required'),
        ({"threads": 1, "verb": None}, 'clients[0].verb (client "c"): required: a verb'),
        ({"threads": 1, "replicas": 0}, 'clients[0].replicas (client "c"): must be at least 1'),
        ({"threads": 1, "method": "FETCH"}, 'clients[0].method (client "c"): expected an HTTP'),
    ],
)
def test_client_errors_name_file_and_field(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(TrafficError) as info:
        parse_traffic(minimal(**change), "t.yaml")
    assert any(expected in e for e in info.value.errors), info.value.errors


def test_every_error_is_reported_at_once() -> None:
    data = minimal(rate="fast")
    data["duration"] = "forever"
    data["clients"].append(
        {"name": "c", "user": "u", "verb": "get", "path": "/", "rate": 1, "serviceTime": "1s"}
    )
    data["color"] = "blue"
    with pytest.raises(TrafficError) as info:
        parse_traffic(data, "t.yaml")
    text = str(info.value)
    assert "t.yaml: color: unknown field" in text
    assert "t.yaml: duration: expected a duration like 60s" in text
    assert "clients[0].rate" in text
    assert 't.yaml: clients[1].name: duplicate name "c"' in text


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([1, 2], "t.yaml: expected a mapping"),
        ({"clients": []}, "t.yaml: duration: required"),
        ({"duration": "1s", "clients": []}, "t.yaml: clients: required: a non-empty list"),
        ({"duration": "1s", "clients": ["x"]}, "t.yaml: clients[0]: expected a mapping"),
        ({"duration": "1s", "seed": "one", "clients": [{}]}, "t.yaml: seed: expected an integer"),
        (
            {"duration": "1s", "serverConcurrencyLimit": 0, "clients": [{}]},
            "t.yaml: serverConcurrencyLimit: must be at least 1",
        ),
    ],
)
def test_top_level_errors(data: Any, expected: str) -> None:
    with pytest.raises(TrafficError) as info:
        parse_traffic(data, "t.yaml")
    assert any(e.startswith(expected) for e in info.value.errors), info.value.errors


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match=r"missing\.yaml: cannot read"):
        load_traffic(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("duration: 10s\nclients: [\n", encoding="utf-8")
    with pytest.raises(TrafficError, match=r"bad\.yaml: invalid YAML \(line \d+, column \d+\)"):
        load_traffic(bad)
    good = write_traffic(tmp_path, minimal(threads=1))
    assert load_traffic(good).source == str(good)
