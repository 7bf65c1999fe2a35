"""``build_middleware`` authenticates as ``serve`` does: a Starlette app behind it, served by
uvicorn on 127.0.0.1, with a real OIDC issuer (discovery + JWKS over HTTPS) and a real
TokenReview webhook. A valid JWT or webhook token reaches the app as its mapped user and is
classified by the YAML FlowSchemas; a bad one gets a 401 Status. The app's lifespan starts
borrowing and stops it, and cancels a key refresh still running."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.asgi.context import request_context
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.http.types import Message
from gateway.sidecar import build_middleware
from tests.frontdoor.conftest import ServerThread
from tests.platform.platform_support import scrape
from tests.support.issuer import (
    HTTPSServer,
    Issuer,
    SigningKey,
    authentication_configuration,
    make_ca,
    running_issuer,
)
from tests.support.wait import async_wait_until
from tests.support.webhook import ReviewApp, kubeconfig

APF = """
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: oidc-admins, uid: fs-oidc-admins}
spec:
  matchingPrecedence: 500
  priorityLevelConfiguration: {name: workload-high}
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: "oidc:admins"}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: webhook-users, uid: fs-webhook-users}
spec:
  matchingPrecedence: 600
  priorityLevelConfiguration: {name: workload-low}
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: webhook-users}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"""
CLAIMS = {"preferred_username": "alice", "sub": "u-1", "groups": ["admins"]}


async def whoami(request: Request) -> JSONResponse:
    context = request_context(request.scope)
    assert context is not None  # set by admission
    user = context.digest.user
    return JSONResponse({"user": user.name, "groups": list(user.groups), "uid": user.uid})


API = Starlette(routes=[Route("/whoami", whoami)])


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[Issuer]:
    yield from running_issuer(tmp_path, [SigningKey.new("k1", "RS256")])


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[HTTPSServer]:
    server = HTTPSServer(make_ca(tmp_path), ReviewApp()).start()
    yield server
    server.stop()


def sidecar_app(
    tmp_path: Path, issuer: Issuer, webhook: HTTPSServer
) -> Callable[[object], FlowControlMiddleware]:
    """Writes the FlowSchemas and the ``AuthenticationConfiguration``; the returned call is
    the app module's one line, ``build_middleware`` naming both token authenticators."""
    authn = tmp_path / "authn.yaml"
    authn.write_text(yaml.safe_dump(authentication_configuration(issuer)))
    apf = tmp_path / "apf.yaml"
    apf.write_text(APF)
    settings = {
        "authentication": {
            "authenticationConfig": str(authn),
            "webhook": {"configFile": str(kubeconfig(tmp_path, webhook))},
        }
    }
    return lambda _loop: build_middleware(API, config_files=[apf], settings=settings)


@pytest.fixture
def sidecar(tmp_path: Path, issuer: Issuer, webhook: HTTPSServer) -> Iterator[ServerThread]:
    server = ServerThread(sidecar_app(tmp_path, issuer, webhook), lifespan="on")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_unauthorized(r: httpx.Response, token: str, why: str) -> None:
    assert r.status_code == 401, why
    status = r.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)
    assert token not in r.text, why


async def test_a_jwt_reaches_the_app_as_its_mapped_user(
    sidecar: ServerThread, issuer: Issuer
) -> None:
    token = issuer.token(**CLAIMS)
    async with httpx.AsyncClient(base_url=sidecar.url) as client:
        r = await client.get("/whoami", headers=bearer(token))
        assert r.status_code == 200, r.text
        assert r.json() == {
            "user": "oidc:alice", "groups": ["oidc:admins", "system:authenticated"], "uid": "u-1",
        }  # fmt: skip
        assert r.headers["x-kubernetes-pf-flowschema-uid"] == "fs-oidc-admins"
        # no credentials: anonymous, another flow schema
        anonymous = await client.get("/whoami")
        assert anonymous.json()["user"] == "system:anonymous"
        assert anonymous.headers["x-kubernetes-pf-flowschema-uid"] != "fs-oidc-admins"

        now = int(time.time())
        forged = SigningKey("k1", "RS256", SigningKey.new("x").private)
        bad = {
            "expired": issuer.token(exp=now - 10, **CLAIMS),
            "wrong audience": issuer.token(aud="other", **CLAIMS),
            "bad signature": issuer.token(forged, **CLAIMS),
            "not a JWT": "not-a-jwt",
        }
        for why, t in bad.items():
            assert_unauthorized(await client.get("/whoami", headers=bearer(t)), t, why)

        m = await scrape(client, sidecar.url)
    key = 'apiserver_flowcontrol_dispatched_requests_total{flow_schema="oidc-admins",'
    assert m[key + 'priority_level="workload-high"}'] == 1
    # kube's authentication metrics, as serve exports them
    assert m['authentication_attempts{result="failure"}'] == 4
    issuer_hash = "sha256:" + hashlib.sha256(issuer.url.encode()).hexdigest()
    latency = "apiserver_authentication_jwt_authenticator_latency_seconds_count"
    assert m[f'{latency}{{jwt_issuer_hash="{issuer_hash}",result="success"}}'] == 1
    assert issuer.app.fetches() == 1  # the keys were fetched once, for the first token


async def test_a_webhook_token_reaches_the_app_as_its_reviewed_user(
    sidecar: ServerThread, webhook: HTTPSServer
) -> None:
    async with httpx.AsyncClient(base_url=sidecar.url) as client:
        r = await client.get("/whoami", headers=bearer("good-bob"))
        assert r.status_code == 200, r.text
        assert r.json() == {
            "user": "bob", "groups": ["webhook-users", "system:authenticated"], "uid": "u-bob",
        }  # fmt: skip
        assert r.headers["x-kubernetes-pf-flowschema-uid"] == "fs-webhook-users"
        assert_unauthorized(await client.get("/whoami", headers=bearer("nobody")), "nobody", "no")
        # the answer is cached (cacheTTL): no second review
        assert (await client.get("/whoami", headers=bearer("good-bob"))).status_code == 200
        m = await scrape(client, sidecar.url)
    app: ReviewApp = webhook.app
    assert app.reviews == ["good-bob", "nobody"]
    assert app.bearer == ["Bearer gateway-to-webhook-secret"] * 2  # the kubeconfig's token
    assert m['apiserver_delegated_authn_request_total{code="200"}'] == 2
    key = 'apiserver_flowcontrol_dispatched_requests_total{flow_schema="webhook-users",'
    assert m[key + 'priority_level="workload-low"}'] == 2


def test_borrowing_runs_from_lifespan_startup_to_shutdown(
    tmp_path: Path, issuer: Issuer, webhook: HTTPSServer
) -> None:
    server = ServerThread(sidecar_app(tmp_path, issuer, webhook), lifespan="on")
    server.start()
    try:
        middleware: FlowControlMiddleware = server.app
        # built at startup, before any request
        assert middleware.adjuster is not None and middleware.adjuster.running
    finally:
        server.stop()
    assert not middleware.adjuster.running


async def test_lifespan_shutdown_cancels_a_key_refresh_in_flight(
    tmp_path: Path, issuer: Issuer, webhook: HTTPSServer
) -> None:
    middleware = sidecar_app(tmp_path, issuer, webhook)(None)
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    sent: list[str] = []

    async def send(message: Message) -> None:
        sent.append(message["type"])

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    lifespan = asyncio.ensure_future(middleware(scope, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    await async_wait_until(lambda: sent == ["lifespan.startup.complete"], what="startup")

    jwt = middleware.describer.authenticator.jwt
    assert jwt is not None
    (keys,) = jwt.keysets()
    fetching = asyncio.Event()

    async def hanging_fetch(url: str) -> object:  # a provider that never answers
        fetching.set()
        await asyncio.Event().wait()

    keys.fetch = hanging_fetch
    keys.refresh_if_due()  # the background refresh a request starts once due
    refresh = keys._task
    assert refresh is not None
    await asyncio.wait_for(fetching.wait(), 10)

    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, 10)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert refresh.cancelled() and keys._task is None
    assert middleware.adjuster is not None and not middleware.adjuster.running
