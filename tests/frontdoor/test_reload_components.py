"""A reload is applied by the components themselves, everywhere or nowhere: when one of them
fails to take its part, the ones already switched go back, and the gateway keeps serving its
last good configuration. The controller computes its limits once per reload."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from gateway.proxy.h1_transport import H1UpstreamTransport
from gateway.proxy.transport import PoolLimits, Timeouts
from gateway.server import Gateway
from gateway.settings.sources import load_config
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.support.wait import wait_until

HEADER = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


class PinnedPool(H1UpstreamTransport):
    """A transport whose pool cannot be resized (as a transport may fail to): the last step
    of a reload that changes the admitted concurrency fails after the others were applied."""

    def set_max_connections(self, limit: int) -> None:
        raise RuntimeError(f"the pool cannot be resized to {limit}")


def config(upstream: str, tokens: Path, *, inflight: int, extra: str = "") -> str:
    return (
        HEADER + f"upstreams: [{{url: '{upstream}'}}]\nconfigPollInterval: 0\n"
        f"maxRequestsInflight: {inflight}\nmaxMutatingRequestsInflight: 10\n"
        f"authentication:\n  tokenAuthFile: {tokens}\n  anonymous: false\n" + extra
    )


def test_a_reload_that_fails_midway_leaves_every_component_on_the_old_config(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> None:
    alice, bob = tmp_path / "alice.csv", tmp_path / "bob.csv"
    alice.write_text('alice-token,alice,1,"dev"\n')
    bob.write_text('bob-token,bob,2,"dev"\n')
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(config(upstream.url, alice, inflight=20))
    overrides = {"configPollInterval": "0"}
    loaded = load_config([cfg], overrides)

    def make(loop: asyncio.AbstractEventLoop) -> Gateway:
        transport = PinnedPool(
            timeouts=Timeouts(connect=5, read=10), limits=PoolLimits(max_connections=30)
        )
        gw = Gateway(loaded, loop=loop, transport=transport)
        gw.enable_reload(loaded, [cfg], overrides)
        return gw

    gw = ServerThread(make).start()
    gateways.append(gw)
    app: Gateway = gw.app
    assert app.controller is not None and app.flow_control is not None
    assert app.reloader is not None and app.flow_control.adjuster is not None
    controller, flow, adjuster = app.controller, app.flow_control, app.flow_control.adjuster

    def state() -> tuple[object, ...]:
        return (
            controller.server_cl,
            controller.config,
            {name: level.nominal_cl for name, level in controller.levels.items()},
            flow.request_timeout,
            adjuster.period,
            app.describer.authenticator,
            app.endpoints.debug_groups,
            app.proxy.headers,
            app.settings,
        )

    before = gw.call(state)
    assert httpx.get(gw.url + "/echo", headers=ALICE).status_code == 200
    failures = app.metrics.reload_failures
    # Every component has something to change; the pool (switched after APF) refuses.
    cfg.write_text(
        config(
            upstream.url, bob, inflight=40,
            extra="requestTimeout: 30s\nborrowingAdjustmentPeriod: 3s\n"
            "debugAllowedGroups: [dev]\n",
        )
    )  # fmt: skip
    gw.loop.call_soon_threadsafe(app.reloader.trigger)
    wait_until(lambda: gw.call(lambda: dict(failures)) == {"apply": 1}, timeout=10)

    assert gw.call(state) == before
    assert gw.call(lambda: app.metrics.last_reload_ok) == 0
    assert httpx.get(gw.url + "/echo", headers=ALICE).status_code == 200
    assert httpx.get(gw.url + "/echo", headers=BOB).status_code == 401
    # A reload the pool has no part in goes through.
    cfg.write_text(config(upstream.url, bob, inflight=20, extra="requestTimeout: 30s\n"))
    gw.loop.call_soon_threadsafe(app.reloader.trigger)
    wait_until(lambda: gw.call(lambda: app.metrics.reloads["success"]) == 1, timeout=10)
    assert gw.call(lambda: flow.request_timeout) == 30.0
    assert httpx.get(gw.url + "/echo", headers=BOB).status_code == 200
    assert httpx.get(gw.url + "/echo", headers=ALICE).status_code == 401


def test_a_reload_changing_the_concurrency_limit_computes_the_limits_once(
    tmp_path: Path,
) -> None:
    upstreams = {"upstreams": [{"url": "http://127.0.0.1:1"}]}
    gw = Gateway(load_config([], {**upstreams, "maxRequestsInflight": 20}), clock=FakeEventClock())
    assert gw.controller is not None
    computed: list[int] = []
    gw.controller.on_digest.append(lambda: computed.append(gw.controller.server_cl))  # type: ignore[union-attr]
    gw.apply(load_config([], {**upstreams, "maxRequestsInflight": 50}))
    assert computed == [250]
    assert gw.controller.server_cl == 250


def test_the_proxy_strips_the_identity_headers_of_the_reloaded_authenticator(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    base = {"upstreams": [{"url": upstream.url}]}
    gw = start_gateway(base)
    gateways.append(gw)
    app: Gateway = gw.app
    renamed = {"authentication": {"requestHeader": {"usernameHeaders": ["X-Proxy-User"]}}}
    gw.call(lambda: app.apply(load_config([], {**base, **renamed})))
    # A client (not a trusted front proxy) claims an identity in the new header: it must not
    # reach the upstream, which may trust it as the old one was trusted.
    r = httpx.get(gw.url + "/echo", headers={"X-Proxy-User": "admin"})
    assert r.status_code == 200
    sent = {name.lower() for name, _ in r.json()["headers"]}
    assert "x-proxy-user" not in sent
    assert "x-remote-user" in sent  # the gateway's own forwarded identity


def test_a_token_file_that_does_not_load_is_refused_as_credentials(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('alice-token,alice,1,"dev"\n')
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(config("http://127.0.0.1:1", tokens, inflight=20))
    loaded = load_config([cfg], {})
    gw = Gateway(loaded, clock=FakeEventClock())
    reloader = gw.enable_reload(loaded, [cfg], {})
    authenticator = gw.describer.authenticator
    tokens.write_text("only-a-token\n")  # no user name
    assert asyncio.run(reloader.reload()) is False
    assert gw.metrics.reload_failures == {"credentials": 1}
    assert gw.describer.authenticator is authenticator and gw.settings is loaded.settings
