"""A reload never weakens what is running: a real ``apf-gateway serve`` whose config file is
truncated, half-written or replaced by a bomb keeps serving the last good configuration, and
says why in its log and metrics. Also: the parse runs off the event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.server import Gateway
from gateway.settings.sources import LoadedConfig, load_config
from tests.frontdoor.conftest import ServerThread
from tests.frontdoor.test_lifecycle import ROOT, _up
from tests.support.ports import free_port
from tests.support.wait import wait_until

TOKEN = {"Authorization": "Bearer alice-token"}
HEADER = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"


class Serve:
    """``apf-gateway serve --config gateway.yaml`` as a subprocess; reloads on SIGHUP only."""

    def __init__(self, tmp_path: Path, upstream: str) -> None:
        self.tokens = tmp_path / "tokens.csv"
        self.tokens.write_text('alice-token,alice,1,"dev"\n')
        self.config = tmp_path / "gateway.yaml"
        self.good = (
            HEADER + f"upstreams: [{{url: '{upstream}'}}]\nconfigPollInterval: 0\n"
            f"authentication:\n  tokenAuthFile: {self.tokens}\n  anonymous: false\n"
        )
        self.config.write_text(self.good)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = tmp_path / "serve.log"
        self._log = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(self.config),
             "--listen", self.url.removeprefix("http://"), "--log-level", "info"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=self._log,
        )  # fmt: skip
        wait_until(lambda: _up(self.url), timeout=15)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", headers=TOKEN).text

    def reload(self, text: str) -> None:
        """Write ``text`` in place (as an editor or ``kubectl cp`` may) and send SIGHUP."""
        before = self.attempts()
        self.config.write_text(text)
        self.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: self.attempts() > before, timeout=15)

    def attempts(self) -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("gateway_config_reloads_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def serve(upstream: ServerThread, tmp_path: Path) -> Iterator[Serve]:
    s = Serve(tmp_path, upstream.url)
    yield s
    s.close()


def assert_still_locked(s: Serve) -> None:
    assert httpx.get(s.url + "/echo").status_code == 401  # anonymous still refused
    assert httpx.get(s.url + "/echo", headers=TOKEN).status_code == 200  # token still works


def test_a_truncated_config_file_is_refused_and_the_last_good_one_keeps_serving(
    serve: Serve,
) -> None:
    assert_still_locked(serve)
    serve.reload("")  # `: > gateway.yaml`
    assert_still_locked(serve)
    metrics = serve.metrics()
    assert 'gateway_config_reloads_total{result="failure"} 1.0' in metrics
    assert "gateway_config_last_reload_successful 0.0" in metrics
    assert 'gateway_config_reload_failures_total{reason="empty"} 1.0' in metrics
    # Cut in the middle of the authentication block: still valid YAML, keys missing.
    serve.reload(serve.good[: serve.good.index("  anonymous")])
    assert_still_locked(serve)
    assert 'gateway_config_reload_failures_total{reason="security_key_missing"} 1.0' in (
        serve.metrics()
    )
    # Cut before the authentication block: the token file would be dropped too.
    serve.reload(serve.good[: serve.good.index("authentication:")])
    assert_still_locked(serve)
    # Cut inside a key: a syntax error.
    serve.reload(serve.good[: serve.good.index("upstreams") + 4] + "\n  x: [")
    assert_still_locked(serve)
    metrics = serve.metrics()
    assert 'gateway_config_reload_failures_total{reason="security_key_missing"} 2.0' in metrics
    assert 'gateway_config_reload_failures_total{reason="syntax"} 1.0' in metrics
    assert 'gateway_config_reloads_total{result="success"} 0.0' in metrics
    # Deleting the file is refused as well.
    before = serve.attempts()
    serve.config.unlink()
    serve.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: serve.attempts() > before, timeout=15)
    assert_still_locked(serve)
    assert 'gateway_config_reload_failures_total{reason="unreadable"} 1.0' in serve.metrics()
    log = serve.log.read_text()
    assert "configuration reload refused (empty)" in log
    assert "holds no documents; an empty (or half-written) file is refused" in log
    assert "authentication.anonymous: key missing; the running value false would become" in log
    assert "authentication.tokenAuthFile: key missing" in log


def test_a_stated_change_to_authentication_is_applied(serve: Serve) -> None:
    serve.reload(serve.good.replace("anonymous: false", "anonymous: true"))
    assert 'gateway_config_reloads_total{result="success"} 1.0' in serve.metrics()
    assert httpx.get(serve.url + "/echo").status_code == 200  # said so explicitly: applied


def test_an_alias_bomb_on_reload_is_refused_and_serving_goes_on(serve: Serve) -> None:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    serve.reload(serve.good + "\n".join(lines) + "\n")
    assert_still_locked(serve)
    assert 'gateway_config_reload_failures_total{reason="too_large"} 1.0' in serve.metrics()
    assert "(maxConfigBytes) with YAML aliases expanded" in serve.log.read_text()


def test_reload_parses_off_the_event_loop_while_requests_are_served(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(HEADER + f"upstreams: [{{url: '{upstream.url}'}}]\n")
    overrides = {"configPollInterval": "0"}
    loaded = load_config([cfg], overrides)
    entered, release = threading.Event(), threading.Event()
    loader_threads: list[threading.Thread] = []

    def make(loop: asyncio.AbstractEventLoop) -> Gateway:
        gw = Gateway(loaded, loop=loop)
        reloader = gw.enable_reload(loaded, [cfg], overrides)

        def blocked_load(*args: object) -> LoadedConfig:
            loader_threads.append(threading.current_thread())
            entered.set()
            assert release.wait(30)
            return load_config(*args)  # type: ignore[arg-type]

        reloader.load = blocked_load
        return gw

    gw = ServerThread(make).start()
    gateways.append(gw)
    app: Gateway = gw.app
    assert app.reloader is not None
    cfg.write_text(HEADER + f"upstreams: [{{url: '{upstream.url}'}}]\nrequestTimeout: 30s\n")
    gw.loop.call_soon_threadsafe(app.reloader.trigger)
    assert entered.wait(10)
    try:
        # The parse is blocked in its thread; the loop still answers.
        assert httpx.get(gw.url + "/echo", timeout=10).status_code == 200
        assert httpx.get(gw.url + "/readyz", timeout=10).status_code == 200
    finally:
        release.set()
    assert loader_threads[0] is not gw.thread
    assert loader_threads[0].name.startswith("config-reload")
    wait_until(lambda: gw.call(lambda: app.settings.request_timeout) == 30.0)


def test_a_yaml_value_json_cannot_hold_is_refused_as_invalid(serve: Serve) -> None:
    # Issue 21 item 8: a !!binary FlowSchema field was counted as reason "apply".
    fs = (
        "---\napiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\n"
        "metadata: {name: odd}\nspec:\n  matchingPrecedence: 500\n"
        "  priorityLevelConfiguration: {name: global-default}\n"
        "  rules:\n  - subjects:\n    - {kind: User, user: {name: !!binary aGVsbG8=}}\n"
        "    nonResourceRules: [{verbs: ['*'], nonResourceURLs: ['/x']}]\n"
    )
    serve.reload(serve.good.replace("anonymous: false", "anonymous: true") + fs)
    assert_still_locked(serve)
    metrics = serve.metrics()
    assert 'gateway_config_reload_failures_total{reason="invalid"} 1.0' in metrics
    assert 'reason="apply"' not in metrics
    log = serve.log.read_text()
    assert "spec.rules[0].subjects[0].user.name: Invalid value: a YAML !!binary value" in log
    assert "Traceback" not in log
