"""Authentication sources and identity forwarding, through a real gateway where it matters."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from gateway.asgi.authn import FrontProxyConfig, RequestAuthenticator, Unauthorized
from gateway.asgi.credentials import load_openwhisk_keys, load_token_file
from gateway.networks import parse_cidrs
from gateway.settings.load import CredentialFileError
from tests.frontdoor.conftest import ServerThread, start_gateway


def _headers(doc: dict[str, object]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in doc["headers"]:  # type: ignore[attr-defined]
        out.setdefault(k, []).append(v)
    return out


def test_token_file_format_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "tokens.csv"
    f.write_text('# comment\nt1,alice,u1,"dev,ops"\nt2,bob,u2\n')
    tokens = load_token_file(f)
    assert tokens["t1"].groups == ("dev", "ops", "system:authenticated")
    assert tokens["t2"].uid == "u2"
    f.write_text("t1,alice\n")
    with pytest.raises(CredentialFileError, match=r"tokens.csv:1: expected token,user,uid"):
        load_token_file(f)


def test_anonymous_can_be_switched_off() -> None:
    auth = RequestAuthenticator(anonymous=False)
    with pytest.raises(Unauthorized):
        auth.authenticate({"headers": [], "client": ("127.0.0.1", 1)})


def test_openwhisk_api_key(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_text("23bc46b1-71f6-4ed5-8c54-816aa4f8c502:secret,guest-subject,guest\n")
    auth = RequestAuthenticator(openwhisk_keys=load_openwhisk_keys(f))
    good = base64.b64encode(b"23bc46b1-71f6-4ed5-8c54-816aa4f8c502:secret")
    user = auth.authenticate({"headers": [(b"authorization", b"Basic " + good)]})
    assert user.name == "guest-subject"
    assert "system:authenticated" in user.groups
    assert user.extra == (("namespace", ("guest",)),)
    bad = base64.b64encode(b"23bc46b1-71f6-4ed5-8c54-816aa4f8c502:wrong")
    with pytest.raises(Unauthorized):
        auth.authenticate({"headers": [(b"authorization", b"Basic " + bad)]})


@pytest.mark.parametrize("trusted", [True, False])
def test_front_proxy_headers_only_from_trusted_networks(
    trusted: bool, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    cidr = "127.0.0.0/8" if trusted else "10.0.0.0/8"
    gw = start_gateway({
        "upstreams": [{"url": upstream.url}],
        "authentication": {"requestHeader": {"allowedCIDRs": [cidr]}},
    })  # fmt: skip
    gateways.append(gw)
    r = httpx.get(
        gw.url + "/echo",
        headers=[("X-Remote-User", "mallory"), ("X-Remote-Group", "system:masters"),
                 ("X-Remote-Group", "ops"), ("X-Remote-Extra-Scopes", "all")],
    )  # fmt: skip
    seen = _headers(r.json())
    if trusted:
        assert seen["x-remote-user"] == ["mallory"]
        assert seen["x-remote-group"] == ["system:masters", "ops", "system:authenticated"]
        assert seen["x-remote-extra-scopes"] == ["all"]
    else:
        assert seen["x-remote-user"] == ["system:anonymous"]
        assert seen["x-remote-group"] == ["system:unauthenticated"]
        assert "x-remote-extra-scopes" not in seen
        # And the spoofed identity did not reach the privileged debug endpoints either.
        debug = httpx.get(
            gw.url + "/debug/api_priority_and_fairness/dump_queues",
            headers={"X-Remote-User": "mallory", "X-Remote-Group": "system:masters"},
        )
        assert debug.status_code == 403


def test_openwhisk_namespace_forwarded_upstream(
    upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("uuid1:key1,subject1,ns1\n")
    gw = start_gateway({
        "upstreams": [{"url": upstream.url}],
        "authentication": {"openwhiskKeysFile": str(keys), "anonymous": False},
    })  # fmt: skip
    gateways.append(gw)
    seen = _headers(httpx.get(gw.url + "/echo", auth=("uuid1", "key1")).json())
    assert seen["x-remote-user"] == ["subject1"]
    assert seen["x-remote-extra-namespace"] == ["ns1"]
    r = httpx.get(gw.url + "/echo")
    assert r.status_code == 401 and r.json()["kind"] == "Status"


def test_front_proxy_config_parses_cidrs() -> None:
    fp = FrontProxyConfig(allowed_cidrs=parse_cidrs(["192.168.0.0/16", "::1"]))
    assert fp.trusts(("192.168.3.4", 1)) and fp.trusts(("::1", 1))
    assert not fp.trusts(("10.0.0.1", 1)) and not fp.trusts(None)
    with pytest.raises(ValueError, match="invalid CIDR"):
        parse_cidrs(["300.1.1.1/8"])
