"""Which identity reaches the upstream and the gateway's own endpoints (issue 14.10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.settings.sources import ConfigLoadError, load_config
from tests.frontdoor.conftest import ServerThread, gateways, start_gateway
from tests.frontdoor.recording_upstream import RecordingUpstream, get, recorder

__all__ = ["gateways", "recorder"]

TRANSPORTS = ["h1", "aiohttp", "httpx", "httpx-aiohttp"]

# Underscore spellings that CGI/WSGI-style servers read as the dashed header.
SPOOFED = [
    "X_Remote_User: mallory",
    "x_remote_group: system:masters",
    "X-Remote_Group: system:masters",
    "X_REMOTE_EXTRA_scopes: all",
    "X-Remote-Extra_scopes: all",
    "X_Forwarded_For: 203.0.113.9",
    "X_Forwarded_Host: evil.example",
    "Proxy_Authorization: Basic eDp5",
    "X-Custom_Header: kept",
]


def _gateway(gws: list[ServerThread], up: RecordingUpstream, **extra: Any) -> ServerThread:
    proxy = extra.pop("proxy", {})
    gw = start_gateway({"upstreams": [{"url": up.url}], "proxy": proxy, **extra})
    gws.append(gw)
    return gw


def _names(up: RecordingUpstream) -> list[str]:
    return [k.lower() for k, _ in up.received[-1].headers]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_underscore_spellings_of_identity_headers_never_reach_the_upstream(
    recorder: RecordingUpstream, gateways: list[ServerThread], transport: str
) -> None:
    gw = _gateway(gateways, recorder, proxy={"transport": transport})
    assert get(gw.port, "/x", *SPOOFED)[0] == 200
    names = _names(recorder)
    assert "x-custom_header" in names  # other underscored headers pass
    dashed = [n.replace("_", "-") for n in names if n != "x-custom_header"]
    assert not [n for n in names if "_" in n and n != "x-custom_header"]
    assert dashed.count("x-remote-user") == 1 and dashed.count("x-forwarded-for") == 1
    seen = recorder.received[-1]
    assert seen.header("x-remote-user") == ["system:anonymous"]
    assert seen.header("x-remote-group") == ["system:unauthenticated"]
    assert seen.header("x-forwarded-for") == ["127.0.0.1"]
    assert not [n for n in dashed if n.startswith("x-remote-extra-")]


def test_trusted_front_proxy_identity_is_matched_exactly(
    recorder: RecordingUpstream, gateways: list[ServerThread]
) -> None:
    gw = _gateway(
        gateways, recorder,
        authentication={"requestHeader": {"allowedCIDRs": ["127.0.0.0/8"]}},
    )  # fmt: skip
    # From a trusted address, the underscore spellings authenticate nobody...
    assert get(gw.port, "/x", "X_Remote_User: mallory", "X_Remote_Group: system:masters")[0] == 200
    assert recorder.received[-1].header("x-remote-user") == ["system:anonymous"]
    assert not [n for n in _names(recorder) if "_" in n]  # nor are they passed on
    status, _ = get(
        gw.port, "/debug/api_priority_and_fairness/dump_queues",
        "X_Remote_User: mallory", "X_Remote_Group: system:masters",
    )  # fmt: skip
    assert status == 403
    # ...while the configured header names do.
    assert get(gw.port, "/x", "X-Remote-User: alice", "X-Remote-Group: ops")[0] == 200
    assert recorder.received[-1].header("x-remote-user") == ["alice"]
    assert recorder.received[-1].header("x-remote-group") == ["ops", "system:authenticated"]


IMPERSONATE = ["Impersonate-User: bob", "Impersonate-Group: system:masters"]


@pytest.mark.parametrize(
    "header",
    ["Impersonate-User: bob", "Impersonate_User: bob", "impersonate-extra-scopes: all",
     "Impersonate-Uid: 1"],
)  # fmt: skip
def test_impersonation_is_refused_by_default(
    recorder: RecordingUpstream, gateways: list[ServerThread], header: str
) -> None:
    gw = _gateway(gateways, recorder)
    status, body = get(gw.port, "/x", header)
    assert status == 403
    doc = json.loads(body)
    assert doc["kind"] == "Status" and "proxy.impersonation" in doc["message"]
    assert recorder.received == []


def test_impersonation_stripped_or_forwarded_by_setting(
    recorder: RecordingUpstream, gateways: list[ServerThread]
) -> None:
    strip = _gateway(gateways, recorder, proxy={"impersonation": "strip"})
    assert get(strip.port, "/x", *IMPERSONATE, "Impersonate_Uid: 7")[0] == 200
    assert not [n for n in _names(recorder) if n.replace("_", "-").startswith("impersonate-")]
    forward = _gateway(gateways, recorder, proxy={"impersonation": "forward"})
    assert get(forward.port, "/x", *IMPERSONATE)[0] == 200
    assert recorder.received[-1].header("impersonate-user") == ["bob"]
    assert recorder.received[-1].header("impersonate-group") == ["system:masters"]


def test_impersonation_setting_is_validated() -> None:
    with pytest.raises(ConfigLoadError, match=r"proxy\.impersonation: must be one of"):
        load_config([], {"upstreams": [{"url": "http://127.0.0.1:1"}],
                         "proxy": {"impersonation": "allow"}})  # fmt: skip


def test_metrics_open_by_default_and_restricted_by_group(
    recorder: RecordingUpstream, gateways: list[ServerThread], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('scraper-token,prometheus,u1,"system:monitoring"\nother,bob,u2\n')
    auth = {"tokenAuthFile": str(tokens)}
    open_gw = _gateway(gateways, recorder, authentication=auth)
    status, body = get(open_gw.port, "/metrics")
    assert status == 200 and b"# TYPE" in body
    closed = _gateway(
        gateways, recorder, authentication=auth, metricsAllowedGroups=["system:monitoring"]
    )
    status, body = get(closed.port, "/metrics")
    assert status == 403 and b"system:anonymous" in body
    assert get(closed.port, "/metrics", "Authorization: Bearer other")[0] == 403
    status, body = get(closed.port, "/metrics", "Authorization: Bearer scraper-token")
    assert status == 200 and b"# TYPE" in body
    assert recorder.received == []  # answered by the gateway, never proxied


def test_new_settings_have_flags() -> None:
    args = build_parser().parse_args([
        "serve", "--upstream", "http://127.0.0.1:1", "--impersonation", "strip",
        "--metrics-allowed-groups", "system:monitoring, ops",
    ])  # fmt: skip
    s = load_config([], overrides_from_args(args)).settings
    assert s.proxy.impersonation == "strip"
    assert s.metrics_allowed_groups == ("system:monitoring", "ops")


# What the proxy adds itself; anything else the upstream sees must come from the client.
ADDED = {"host", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-remote-user",
         "x-remote-group", "x-request-id"}  # fmt: skip
FRAMING = {"content-length", "transfer-encoding"}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_only_the_clients_headers_are_forwarded(
    recorder: RecordingUpstream, gateways: list[ServerThread], transport: str, method: str
) -> None:
    # Issue 21 item 11: httpx added Accept, Accept-Encoding, Connection and User-Agent;
    # httpx-aiohttp also Content-Type: application/octet-stream on a body-less POST.
    recorder.reply_headers = b"set-cookie: session=alice-secret; Path=/\r\n"
    gw = _gateway(gateways, recorder, proxy={"transport": transport})
    assert get(gw.port, "/x", "X-Client: 1", method=method)[0] == 200
    assert get(gw.port, "/x", "X-Client: 2", method=method)[0] == 200
    for seen in recorder.received:
        names = {k.lower() for k, _ in seen.headers}
        assert names - FRAMING == ADDED | {"x-client"}, seen.headers
    # A client's answer never becomes another client's request (httpx's client cookie jar).
    assert recorder.received[-1].header("cookie") == []
    # What the client sends of those headers itself goes on, once and unchanged.
    sent = ("Accept: text/x", "User-Agent: c/1", "Accept-Encoding: identity")
    assert get(gw.port, "/x", *sent, method=method)[0] == 200
    seen = recorder.received[-1]
    for line in sent:
        name, _, value = line.partition(": ")
        assert seen.header(name) == [value], seen.headers
