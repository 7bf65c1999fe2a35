"""Webhook token authentication against a real TokenReview webhook over HTTPS on 127.0.0.1:
answers cached (yes and no, for cacheTTL, on a fake clock), errors not cached and never
anonymous, a timeout, bounded concurrency, metrics; and through a running front door."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.asgi.authn import RequestAuthenticator, Unauthorized
from gateway.asgi.webhookauth import TokenWebhook, load_webhook_config
from gateway.settings.load import CredentialFileError
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.platform.platform_support import scrape
from tests.support.issuer import HTTPSServer, make_ca
from tests.support.wait import async_wait_until
from tests.support.webhook import ReviewApp, kubeconfig


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[HTTPSServer]:
    server = HTTPSServer(make_ca(tmp_path), ReviewApp()).start()
    yield server
    server.stop()


def scope(token: str) -> dict[str, object]:
    return {"headers": [(b"authorization", f"Bearer {token}".encode())]}


async def authenticate(auth: RequestAuthenticator, token: str) -> object:
    assert auth.prefetch is not None
    await auth.prefetch(scope(token))
    return auth.authenticate(scope(token))


async def test_answers_are_cached_for_the_ttl_and_errors_are_not(
    tmp_path: Path, webhook: HTTPSServer
) -> None:
    clock = FakeEventClock(0.0)
    hook = TokenWebhook(load_webhook_config(kubeconfig(tmp_path, webhook)), now=clock.now)
    seen: list[str] = []
    hook.observe = lambda code, _seconds: seen.append(code)
    auth = RequestAuthenticator(webhook=hook)
    app: ReviewApp = webhook.app
    user = await authenticate(auth, "good-alice")
    assert (user.name, user.groups, user.uid, user.extra) == (  # type: ignore[attr-defined]
        "alice", ("webhook-users", "system:authenticated"), "u-alice", (("team", ("a",)),),
    )  # fmt: skip
    assert app.bearer == ["Bearer gateway-to-webhook-secret"]  # the kubeconfig's credentials
    with pytest.raises(Unauthorized):  # the webhook says no: 401, never anonymous
        await authenticate(auth, "nobody")
    assert app.reviews == ["good-alice", "nobody"]
    # both answers are cached for cacheTTL (2m, as kube's default)
    clock.run_until(119.0)
    await authenticate(auth, "good-alice")
    with pytest.raises(Unauthorized):
        await authenticate(auth, "nobody")
    assert app.reviews == ["good-alice", "nobody"]
    clock.run_until(120.0)
    await authenticate(auth, "good-alice")
    with pytest.raises(Unauthorized):
        await authenticate(auth, "nobody")
    assert app.reviews == ["good-alice", "nobody"] * 2
    # a failing webhook: 401 for a new token, every time asked again (errors are not cached)
    app.failing = True
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await authenticate(auth, "good-bob")
    assert app.reviews[-2:] == ["good-bob", "good-bob"]
    assert seen == ["200"] * 4 + ["500"] * 2


async def test_a_timeout_is_401_and_concurrency_is_bounded(
    tmp_path: Path, webhook: HTTPSServer
) -> None:
    config = load_webhook_config(kubeconfig(tmp_path, webhook))
    app: ReviewApp = webhook.app
    hook = TokenWebhook(config, timeout=0.3, max_concurrency=2)
    codes: list[str] = []
    hook.observe = lambda code, _seconds: codes.append(code)
    auth = RequestAuthenticator(webhook=hook)
    # five held reviews, at most two at the webhook at once; each times out -> 401
    results = await asyncio.gather(
        *(authenticate(auth, f"hold-{i}") for i in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, Unauthorized) for r in results), results
    assert codes == ["error"] * 5
    assert app.max_held == 2
    webhook.loop.call_soon_threadsafe(app.release.set)  # type: ignore[union-attr]
    gc.collect()  # a connection left open by a timed-out review would warn here, in this test


def test_kubeconfig_errors_name_the_file_and_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.kubeconfig"
    f.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {}}]\n")
    with pytest.raises(CredentialFileError, match=r"bad.kubeconfig: clusters\[0\].cluster.server"):
        load_webhook_config(f)


async def test_through_the_front_door(
    tmp_path: Path, webhook: HTTPSServer, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = start_gateway({
        "upstreams": [{"url": upstream.url}],
        "authentication": {"webhook": {"configFile": str(kubeconfig(tmp_path, webhook))}},
    })  # fmt: skip
    gateways.append(gw)
    async with httpx.AsyncClient(base_url=gw.url) as client:
        r = await client.get("/echo", headers={"Authorization": "Bearer good-carol"})
        assert r.status_code == 200
        users = [v for k, v in r.json()["headers"] if k.lower() == "x-remote-user"]
        assert users == ["carol"]
        r = await client.get("/echo", headers={"Authorization": "Bearer wrong-token-value"})
        assert r.status_code == 401 and "wrong-token-value" not in r.text
        webhook.app.failing = True
        r = await client.get("/echo", headers={"Authorization": "Bearer good-dave"})
        assert r.status_code == 401

        async def counted() -> bool:
            m = await scrape(client, gw.url)
            return (
                m.get('apiserver_delegated_authn_request_total{code="200"}') == 2
                and m.get('apiserver_delegated_authn_request_total{code="500"}') == 1
            )

        await async_wait_until(counted, what="the webhook's request counts")
