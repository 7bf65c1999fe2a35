"""The report's arithmetic and the generated configuration (no Locust, no load)."""

from __future__ import annotations

import asyncio
import math
import socket
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.settings.sources import load_config
from loadtests import fairness, promtext, scenario
from loadtests.balancer import Balancer
from loadtests.runner import generator_verdict


def test_jain_matches_the_atm_forum_example() -> None:
    # measured (50, 30, 50) against fair (50, 10, 10): x = (1, 3, 5), J = 81/105
    x = [m / f for m, f in zip((50, 30, 50), (50, 10, 10), strict=True)]
    assert fairness.jain(x) == pytest.approx(81 / 105)
    assert fairness.jain([2.0, 2.0, 2.0]) == 1.0
    assert fairness.jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_max_min_fair_is_water_filling() -> None:
    assert fairness.max_min_fair([12, 6, 0.25, 1], 10) == pytest.approx([4.375, 4.375, 0.25, 1])
    assert fairness.max_min_fair([1, 2], 10) == [1, 2]  # no competition: everyone's demand
    assert fairness.max_min_fair([5, 5, 5], 6) == pytest.approx([2, 2, 2])


def test_demands_in_seats() -> None:
    assert fairness.closed_loop_demand(8, 1, 0.1, 0.0) == 8
    assert fairness.closed_loop_demand(4, 2, 0.1, 0.3) == pytest.approx(2.0)
    assert fairness.rate_demand(2, 1, 5.0, 0.1) == pytest.approx(1.0)
    assert fairness.rate_demand(1, 1, 50.0, 0.1) == 1.0  # a user cannot exceed one request


def test_percentile_interpolates() -> None:
    assert fairness.percentile([1, 2, 3, 4], 0.5) == 2.5
    assert math.isnan(fairness.percentile([], 0.99))


REJ = "apiserver_flowcontrol_rejected_requests_total"
WAIT = "apiserver_flowcontrol_request_wait_duration_seconds"
LBL = 'execute="true",flow_schema="fs",priority_level="pl"'


def _metrics(rejected: int, le_01: int, le_1: int) -> str:
    return "\n".join(
        [
            f"# TYPE {REJ} counter",
            f'{REJ}{{flow_schema="fs",priority_level="pl",reason="time-out"}} {rejected}',
            f"# TYPE {WAIT} histogram",
            f'{WAIT}_bucket{{{LBL},le="0.1"}} {le_01}',
            f'{WAIT}_bucket{{{LBL},le="1.0"}} {le_1}',
            f'{WAIT}_bucket{{{LBL},le="+Inf"}} {le_1}',
            f"{WAIT}_sum{{{LBL}}} 0",
            f"{WAIT}_count{{{LBL}}} {le_1}",
            "",
        ]
    )


def test_metric_deltas_and_histogram_quantiles() -> None:
    d = promtext.delta(promtext.parse(_metrics(2, 0, 0)), promtext.parse(_metrics(7, 50, 100)))
    assert promtext.by_label(d, REJ, "reason", priority_level="pl") == {"time-out": 5.0}
    h = promtext.histogram(d, WAIT, execute="true")
    assert h.count == 100
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.99) == pytest.approx(0.1 + 0.9 * 49 / 50)


def test_generated_configuration_loads_in_the_gateway(tmp_path: Path) -> None:
    sc = scenario.load("priority-isolation")
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(scenario.token_csv(sc.tenants))
    scenario.write_config(tmp_path / "config", sc.doc, sc.tenants, tokens)
    loaded = load_config([tmp_path / "config"])
    assert loaded.settings.authentication.token_auth_file == str(tokens)
    assert loaded.settings.too_many_requests_body == "status"
    assert loaded.flow is not None
    users = {line.split(",")[1] for line in tokens.read_text().splitlines()}
    assert users == {"vip", "batch-1", "batch-2", "batch-3", scenario.SCRAPER}


def test_every_shipped_scenario_loads_and_validates(tmp_path: Path) -> None:
    for name in scenario.available():
        sc = scenario.load(name)
        out = tmp_path / name
        out.mkdir()
        scenario.write_config(out, sc.doc, sc.tenants, tmp_path / "tokens.csv")
        (tmp_path / "tokens.csv").write_text(scenario.token_csv(sc.tenants))
        load_config([out])  # raises ConfigLoadError naming the problem


def test_reload_changes_rewrite_a_level() -> None:
    doc = {"levels": [{"name": "a", "shares": 30}]}
    new = scenario.apply_changes(doc, {"levels": {"a": {"shares": 65}}})
    assert new["levels"][0]["shares"] == 65 and doc["levels"][0]["shares"] == 30
    with pytest.raises(scenario.ScenarioError, match="no level 'b'"):
        scenario.apply_changes(doc, {"levels": {"b": {"shares": 1}}})


def test_bad_scenarios_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(scenario.ScenarioError, match="no scenario 'nope'"):
        scenario.load("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants: [{name: x, kind: whale}]\n")
    with pytest.raises(scenario.ScenarioError, match=r"tenants\[0\].kind"):
        scenario.load(str(bad))
    with pytest.raises(scenario.ScenarioError, match="duration"):
        scenario.seconds("soon", "duration")


async def _echo_server(tag: bytes) -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        writer.write(tag + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _ask(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"hi")
        return s.recv(100)


async def test_balancer_switches_new_connections() -> None:
    a, port_a = await _echo_server(b"A:")
    b, port_b = await _echo_server(b"B:")
    bal = Balancer(port_a)
    bal.start()
    try:
        assert await asyncio.to_thread(_ask, bal.port) == b"A:hi"
        bal.switch(port_b)
        assert await asyncio.to_thread(_ask, bal.port) == b"B:hi"
        assert bal.connections == 2
    finally:
        bal.stop()
        a.close()
        b.close()


def test_cli_lists_scenarios_and_refuses_unknown_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loadtest", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in ("equal-tenants", "mice-elephants", "rolling-restart", "openwhisk"):
        assert name in listed
    assert main(["loadtest", "no-such-scenario", "--out", "/nonexistent/x"]) == 2
    assert "no scenario 'no-such-scenario'" in capsys.readouterr().err


def test_generator_bottleneck_verdict() -> None:
    warning = "vm/WARNING/root: CPU usage above 90%! This may constrain your throughput"
    assert generator_verdict(warning, 30.0) == (True, True)
    workers = "CPU usage threshold was exceeded on workers during the test!"
    assert generator_verdict(workers, 30.0) == (True, True)
    assert generator_verdict("All users spawned", 95.0) == (False, True)
    assert generator_verdict("All users spawned", 12.0) == (False, False)
