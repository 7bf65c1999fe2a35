"""Hot reload under load and SIGTERM drain of a real ``apf-gateway serve`` process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from gateway.server import Gateway
from gateway.settings.sources import load_config
from tests.frontdoor.conftest import ServerThread, holding
from tests.support.ports import free_port
from tests.support.wait import wait_until

CONFIG = Path(__file__).with_name("apf_config.yaml")
ROOT = Path(__file__).resolve().parents[2]


def nominal(url: str, level: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(f'apiserver_flowcontrol_nominal_limit_seats{{priority_level="{level}"'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no nominal_limit_seats for {level}")


def test_hot_reload_under_load_drops_nothing(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> None:
    cfg = tmp_path / "flow.yaml"
    # Big server limit so the load itself never saturates; only the shares change.
    text = CONFIG.read_text().replace("maxRequestsInflight: 2", "maxRequestsInflight: 200")
    cfg.write_text(text)
    overrides = {"upstreams": [{"url": upstream.url}], "configPollInterval": "20ms"}
    loaded = load_config([cfg], overrides)

    def make(loop: asyncio.AbstractEventLoop) -> Gateway:
        gw = Gateway(loaded, loop=loop)
        gw.enable_reload(loaded, [cfg], overrides)
        return gw

    gw = ServerThread(make).start()
    gateways.append(gw)
    before = nominal(gw.url, "tiny-queue")
    stop = threading.Event()
    codes: list[int] = []

    def load() -> None:
        with httpx.Client(base_url=gw.url) as client:
            while not stop.is_set():
                codes.append(client.get("/queue/echo").status_code)

    with ThreadPoolExecutor(5) as pool:
        held = pool.submit(httpx.get, gw.url + "/queue/hold/r", timeout=10)
        wait_until(lambda: "r" in holding(upstream))
        workers = [pool.submit(load) for _ in range(3)]
        try:
            _reload_twice(gw, cfg, text, before, codes)
        finally:  # never leave the load threads running (the pool would wait for them)
            stop.set()
            httpx.get(upstream.url + "/release/r")
        for w in workers:
            w.result()
        assert held.result().status_code == 200  # in flight across both reloads
    assert set(codes) == {200}, f"{len(codes)} requests, codes {sorted(set(codes))}"
    metrics = httpx.get(gw.url + "/metrics").text
    assert 'gateway_config_reloads_total{result="success"} 1.0' in metrics
    assert "gateway_config_last_reload_successful 0.0" in metrics
    assert nominal(gw.url, "tiny-queue") > before


def _reload_twice(gw: ServerThread, cfg: Path, text: str, before: float, codes: list[int]) -> None:
    """A valid reload, then an invalid one, each while the load keeps running."""
    wait_until(lambda: len(codes) > 50, timeout=30)
    _replace(cfg, text.replace("nominalConcurrencyShares: 5\n    lendablePercent: 0\n"
                                "    borrowingLimitPercent: 0\n    limitResponse:\n"
                                "      type: Queue",
                                "nominalConcurrencyShares: 50\n    lendablePercent: 0\n"
                                "    borrowingLimitPercent: 0\n    limitResponse:\n"
                                "      type: Queue"))  # fmt: skip
    wait_until(lambda: nominal(gw.url, "tiny-queue") > before, timeout=30)
    n = len(codes)
    wait_until(lambda: len(codes) > n + 50, timeout=30)
    # An invalid file is refused; the last good configuration keeps serving.
    _replace(cfg, text.replace("queueLengthLimit: 1", "queueLengthLimit: -3"))
    wait_until(lambda: "gateway_config_reloads_total{result=\"failure\"} 1.0"
               in httpx.get(gw.url + "/metrics").text, timeout=30)  # fmt: skip
    n = len(codes)
    wait_until(lambda: len(codes) > n + 50, timeout=30)


def _replace(path: Path, text: str) -> None:
    """Swap the file in one step (as a ConfigMap update does), so the poller never reads a
    half-written file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def test_sighup_reloads_and_sigterm_drains_and_exits_zero(
    upstream: ServerThread, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = tmp_path / "flow.yaml"
    config.write_text(CONFIG.read_text())
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--upstream",
         upstream.url, "--listen", f"127.0.0.1:{port}", "--shutdown-grace-period", "10",
         "--config-poll-interval", "0", "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=log,
    )  # fmt: skip
    try:
        wait_until(lambda: _up(url), timeout=15)
        assert httpx.get(url + "/readyz").status_code == 200
        # SIGHUP reloads (polling is off): the new share shows in the nominal limit.
        before = nominal(url, "tiny-reject")
        config.write_text(CONFIG.read_text().replace(
            "nominalConcurrencyShares: 5\n    lendablePercent: 0\n    borrowingLimitPercent: 0\n"
            "    limitResponse: {type: Reject}",
            "nominalConcurrencyShares: 200\n    lendablePercent: 0\n    borrowingLimitPercent: 0\n"
            "    limitResponse: {type: Reject}",
        ))  # fmt: skip
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: nominal(url, "tiny-reject") > before)
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(httpx.get, url + "/queue/hold/a", timeout=15)
            wait_until(lambda: "a" in holding(upstream))
            queued = pool.submit(httpx.get, url + "/queue/hold/b", timeout=15)
            wait_until(lambda: 'flow_schema="queue-fs",priority_level="tiny-queue"} 1.0'
                       in _inqueue(url))  # fmt: skip
            proc.send_signal(signal.SIGTERM)
            refused = queued.result()
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
            httpx.get(upstream.url + "/release/a")
            assert running.result().status_code == 200  # executing work finished
        assert proc.wait(15) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/livez").status_code == 200
    except httpx.TransportError:
        return False


def _inqueue(url: str) -> str:
    lines = httpx.get(url + "/metrics").text.splitlines()
    return "\n".join(
        x for x in lines if x.startswith("apiserver_flowcontrol_current_inqueue_requests")
    )
