"""``gateway.sidecar.build_middleware``: what it reads, what it refuses at build time, and the
settings it carries into the app (``/metrics`` access, debug dumps, the caller's registry)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.asgi.authconfig import AuthenticationConfigError
from gateway.asgi.flowcontrol import FlowControlMiddleware
from gateway.settings.load import CredentialFileError
from gateway.settings.sources import ConfigLoadError
from gateway.sidecar import build_middleware
from tests.frontdoor.conftest import ServerThread

TOKENS = 'admin-token,admin,1,"system:masters"\nscraper-token,scraper,2,"monitoring"\n'


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


API = Starlette(routes=[Route("/hello", hello)])


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.csv"
    path.write_text(TOKENS)
    return path


def test_a_bad_flowschema_fails_at_build_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "flow.yaml"
    bad.write_text(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: x}\n"
        "spec: {priorityLevelConfiguration: {name: global-default}, matchingPrecedence: -1}\n"
    )
    with pytest.raises(ConfigLoadError) as caught:
        build_middleware(API, config_files=[bad])
    assert "flow.yaml" in str(caught.value)
    assert "spec.matchingPrecedence" in str(caught.value)


def test_a_bad_token_file_fails_at_build_naming_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "tokens.csv"
    bad.write_text("only-a-token\n")
    with pytest.raises(CredentialFileError, match=r"tokens\.csv:1"):
        build_middleware(API, token_file=bad)


@pytest.mark.parametrize(
    ("key", "authentication"),
    [
        ("clientCAFile", {"clientCAFile": "ca.crt"}),
        ("requestHeader.clientCAFile", {"requestHeader": {"clientCAFile": "ca.crt"}}),
    ],
)
def test_client_certificates_are_refused_at_build(
    key: str, authentication: dict[str, object]
) -> None:
    # With serve's TLS listener in a shared configuration (ignored in-process, with a warning):
    # the app's server never hands the certificate to the app, so it would authenticate no one.
    settings = {"tls": {"certFile": "tls.crt", "privateKeyFile": "tls.key"},
                "authentication": authentication}  # fmt: skip
    with pytest.raises(ValueError, match=rf"authentication\.{key}: client certificates need"):
        build_middleware(API, settings=settings)


def test_a_bad_authentication_config_fails_at_build_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "authn.yaml"
    bad.write_text(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n"
        "jwt:\n- issuer: {url: 'http://issuer.example', audiences: [apf]}\n"
        "  claimMappings: {username: {claim: sub, prefix: ''}}\n"
    )
    with pytest.raises(AuthenticationConfigError, match=r"authn\.yaml: jwt\[0\]\.issuer\.url"):
        build_middleware(API, settings={"authentication": {"authenticationConfig": str(bad)}})


def test_a_bad_webhook_kubeconfig_fails_at_build(tmp_path: Path) -> None:
    bad = tmp_path / "webhook.kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(CredentialFileError, match=r"clusters\[0\]\.cluster\.server"):
        build_middleware(API, settings={"authentication": {"webhook": {"configFile": str(bad)}}})


def test_apf_off_is_refused() -> None:
    with pytest.raises(ValueError, match="enablePriorityAndFairness"):
        build_middleware(API, settings={"enablePriorityAndFairness": False})


def test_settings_only_serve_reads_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "gateway.sidecar"):
        middleware = build_middleware(
            API,
            settings={
                "upstreams": [{"url": "http://127.0.0.1:1"}],
                "tls": {"certFile": "tls.crt", "privateKeyFile": "tls.key"},
                "requestTimeout": "20s",
            },
        )
    assert [r.getMessage() for r in caplog.records] == [
        "command line: tls is ignored in-process (apf-gateway serve only)",
        "command line: upstreams is ignored in-process (apf-gateway serve only)",
    ]
    assert middleware.request_timeout == 20.0  # the others apply


@pytest.fixture
def server(tokens: Path) -> Iterator[ServerThread]:
    registry = CollectorRegistry()
    Counter("app_greetings", "The app's own metric", registry=registry).inc()

    def make(loop: asyncio.AbstractEventLoop) -> FlowControlMiddleware:
        return build_middleware(
            API, token_file=tokens, registry=registry,
            settings={"metricsAllowedGroups": ["monitoring"]},
        )  # fmt: skip

    server = ServerThread(make, lifespan="on").start()
    try:
        yield server
    finally:
        server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_metrics_serve_the_callers_registry_to_the_allowed_groups(server: ServerThread) -> None:
    hello = httpx.get(server.url + "/hello")
    assert hello.text == "hello"
    assert hello.headers["X-Kubernetes-PF-PriorityLevel-UID"]
    anonymous = httpx.get(server.url + "/metrics")
    assert anonymous.status_code == 403  # metricsAllowedGroups: monitoring only
    assert anonymous.headers["X-Kubernetes-PF-PriorityLevel-UID"]  # admitted, then refused
    scrape = httpx.get(server.url + "/metrics", headers=bearer("scraper-token"))
    assert scrape.status_code == 200
    assert "app_greetings_total 1.0" in scrape.text
    assert 'apiserver_flowcontrol_nominal_limit_seats{priority_level="global-default"}' in (
        scrape.text
    )
    # Borrowing runs from the first request on (the controller was built on the loop then).
    middleware: FlowControlMiddleware = server.app
    assert middleware.adjuster is not None and middleware.adjuster.running


def test_debug_dumps_answer_system_masters(server: ServerThread) -> None:
    path = "/debug/api_priority_and_fairness/dump_priority_levels"
    assert httpx.get(server.url + path, headers=bearer("scraper-token")).status_code == 403
    dump = httpx.get(server.url + path, headers=bearer("admin-token"))
    assert dump.status_code == 200
    assert "global-default" in dump.text and "exempt" in dump.text
