"""The front door's own errors on routes marked ``errorFormat: openwhisk``: OpenWhisk's
``{"error", "code"}`` body there, Kubernetes ``Status`` (or kube-apiserver's text 429) elsewhere.
A real gateway and upstream on 127.0.0.1; the APF core runs on a fake clock."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.server import Gateway
from gateway.settings.sources import ConfigLoadError, load_config
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, holding, start_gateway
from tests.support.ports import free_port
from tests.support.wait import wait_until

CONFIG = str(Path(__file__).with_name("apf_config.yaml"))
KEY = ("23bc46b1-71f6-4ed5-8c54-816aa4f8c502", "secret")
TID = re.compile(r"^[0-9a-f]{32}$")


def basic(uuid: str, key: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{uuid}:{key}".encode()).decode()}


GOOD = basic(*KEY)
WRONG = basic(KEY[0], "not-the-key")


def openwhisk_error(r: httpx.Response, status: int) -> str:
    """The response is OpenWhisk's error body with ``status``; its message."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    doc = r.json()
    assert set(doc) == {"error", "code"}, doc
    assert TID.match(doc["code"]), doc
    return str(doc["error"])


def kubernetes_status(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    doc: dict[str, Any] = r.json()
    assert doc["kind"] == "Status" and doc["code"] == status
    return doc


def settings(upstream: ServerThread, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY[0]}:{KEY[1]},guest,guest\n")
    return {
        "upstreams": [
            {"url": upstream.url, "prefix": "/reject/", "errorFormat": "openwhisk"},
            {"url": upstream.url, "prefix": "/queue/", "errorFormat": "openwhisk"},
            {"url": upstream.url},
        ],
        "authentication": {"openwhiskKeysFile": str(keys), "anonymous": False},
        **extra,
    }


@pytest.fixture
def gw(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> Iterator[ServerThread]:
    server = start_gateway(
        settings(upstream, tmp_path), [CONFIG], clock=lambda loop: FakeEventClock(start=1000.0)
    )
    gateways.append(server)
    yield server


def test_unauthorized_in_the_routes_shape(gw: ServerThread) -> None:
    wrong = httpx.get(gw.url + "/reject/echo", headers=WRONG)
    assert openwhisk_error(wrong, 401) == "The supplied authentication is invalid"
    missing = httpx.get(gw.url + "/reject/echo")
    assert openwhisk_error(missing, 401) == (
        "The resource requires authentication, which was not supplied with the request"
    )
    garbled = httpx.get(gw.url + "/queue/echo", headers={"Authorization": "Basic %%%"})
    assert openwhisk_error(garbled, 401) == "The supplied authentication is invalid"
    # every error gets its own transaction id
    assert wrong.json()["code"] != missing.json()["code"]
    # other routes keep the Kubernetes Status
    doc = kubernetes_status(httpx.get(gw.url + "/echo", headers=WRONG), 401)
    assert doc["reason"] == "Unauthorized"
    assert httpx.get(gw.url + "/reject/echo", headers=GOOD).status_code == 200


def test_refused_paths_in_the_routes_shape(gw: ServerThread) -> None:
    """A path the canonical check refuses (an encoded slash) is a 400 in the route's shape."""
    message = openwhisk_error(httpx.get(gw.url + "/reject/a%2Fb", headers=GOOD), 400)
    assert message.startswith("invalid request path: ")
    doc = kubernetes_status(httpx.get(gw.url + "/a%2Fb", headers=GOOD), 400)
    assert doc["reason"] == "BadRequest"


def test_apf_rejection_and_drain_in_openwhisk_shape(
    gw: ServerThread, upstream: ServerThread, pool: ThreadPoolExecutor
) -> None:
    first = pool.submit(httpx.get, gw.url + "/reject/hold/a", headers=GOOD, timeout=10)
    wait_until(lambda: "a" in holding(upstream))
    r = httpx.get(gw.url + "/reject/echo", headers=GOOD)
    assert openwhisk_error(r, 429) == (
        "Too many concurrent requests in flight (count: 1, allowed: 1)."
    )
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"]  # APF's headers are kept
    httpx.get(upstream.url + "/release/a")
    assert first.result().status_code == 200

    # shutdown refuses what is queued: OpenWhisk's overload text
    running = pool.submit(httpx.get, gw.url + "/queue/hold/b", headers=GOOD, timeout=10)
    wait_until(lambda: "b" in holding(upstream))
    queued = pool.submit(httpx.get, gw.url + "/queue/echo", headers=GOOD, timeout=10)
    app: Gateway = gw.app
    assert app.controller is not None
    qs = app.controller.levels["tiny-queue"].qs
    wait_until(lambda: gw.call(lambda: qs.tot_requests_waiting) == 1)
    gw.call(app.begin_drain)
    assert openwhisk_error(queued.result(), 429) == "System is overloaded, try again later."
    httpx.get(upstream.url + "/release/b")
    assert running.result().status_code == 200


def test_max_in_flight_rejection_in_openwhisk_shape(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> None:
    gw = start_gateway(
        settings(upstream, tmp_path, enablePriorityAndFairness=False, maxRequestsInflight=1)
    )
    gateways.append(gw)
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(httpx.get, gw.url + "/reject/hold/m", headers=GOOD, timeout=10)
        wait_until(lambda: "m" in holding(upstream))
        r = httpx.get(gw.url + "/reject/echo", headers=GOOD)
        assert openwhisk_error(r, 429) == (
            "Too many concurrent requests in flight (count: 1, allowed: 1)."
        )
        assert r.headers["retry-after"] == "1"
        plain = httpx.get(gw.url + "/echo", headers=GOOD)  # a Kubernetes path: text, as before
        assert plain.status_code == 429 and plain.text.startswith("Too many requests")
        assert openwhisk_error(httpx.get(gw.url + "/reject/x", headers=WRONG), 401)
        httpx.get(upstream.url + "/release/m")
        assert busy.result().status_code == 200


def test_unreachable_upstream_is_502_without_its_address(
    gateways: list[ServerThread], tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    gw = start_gateway(
        {
            "upstreams": [
                {"url": dead, "prefix": "/api/v1", "errorFormat": "openwhisk"},
                {"url": dead},
            ]
        }
    )
    gateways.append(gw)
    r = httpx.get(gw.url + "/api/v1/namespaces")
    message = openwhisk_error(r, 502)
    assert message.startswith("The server was acting as a gateway or proxy")
    assert dead.split("//")[1] not in r.text
    assert kubernetes_status(httpx.get(gw.url + "/other"), 502)["reason"] == "ServiceUnavailable"


def test_error_format_is_validated_and_set_by_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigLoadError) as exc:
        load_config([], {"upstreams": [{"url": "http://127.0.0.1:1", "errorFormat": "json"}]})
    assert (
        "upstreams[0].errorFormat: must be one of 'kubernetes', 'openwhisk', got 'json'"
        in "\n".join(exc.value.errors)
    )
    args = build_parser().parse_args([
        "serve", "--upstream", "/api/v1=http://127.0.0.1:2", "--upstream", "http://127.0.0.1:3",
        "--upstream-error-format", "/api/v1=openwhisk",
    ])  # fmt: skip
    ups = load_config([], overrides_from_args(args)).settings.upstreams
    assert [(u.prefix, u.error_format) for u in ups] == [
        ("/api/v1", "openwhisk"),
        ("/", "kubernetes"),
    ]
    bad = build_parser().parse_args([
        "serve", "--upstream", "http://127.0.0.1:3", "--upstream-error-format", "/x=openwhisk",
    ])  # fmt: skip
    with pytest.raises(ValueError, match="no --upstream has prefix '/x'"):
        overrides_from_args(bad)
