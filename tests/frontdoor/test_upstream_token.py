"""Issue 21: the front door authenticates itself to an upstream (the platform's routers) with
a token, in place of the client's ``Authorization``, and passes no client-sent ``X-Apf-*``
header along with it (the token makes the routers believe what travels with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.settings.load import CredentialFileError
from tests.frontdoor.conftest import ServerThread, gateways, start_gateway
from tests.frontdoor.recording_upstream import RecordingUpstream, get, recorder

__all__ = ["gateways", "recorder"]

TOKEN = "t" * 43


def _token_file(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "internal-token"
    path.write_text(TOKEN + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("transport", ["h1", "aiohttp", "httpx"])
def test_the_token_replaces_the_clients_authorization(
    recorder: RecordingUpstream, gateways: list[ServerThread], tmp_path: Path, transport: str
) -> None:
    token = str(_token_file(tmp_path))
    upstreams = [
        {"url": recorder.url, "prefix": "/api/", "bearerTokenFile": token},
        {"url": recorder.url, "prefix": "/other/"},
    ]
    gw = start_gateway({"upstreams": upstreams, "proxy": {"transport": transport}})
    gateways.append(gw)
    spoofed = (
        "Authorization: Basic bWFsbG9yeTpwdw==",
        "X-Apf-Proxied-By: router-1",
        "X_Apf_Activation_Id: " + "0" * 32,
        "X-Custom: kept",
    )
    assert get(gw.port, "/api/v1/x", *spoofed)[0] == 200
    seen = recorder.received[-1]
    assert seen.header("authorization") == [f"Bearer {TOKEN}"]
    names = [k.lower().replace("_", "-") for k, _ in seen.headers]
    assert not [n for n in names if n.startswith("x-apf-")]
    assert seen.header("x-custom") == ["kept"]
    # another route is not given the token: the client's header passes as before
    assert get(gw.port, "/other/x", *spoofed)[0] == 200
    assert recorder.received[-1].header("authorization") == ["Basic bWFsbG9yeTpwdw=="]


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = _token_file(tmp_path, 0o644)
    with pytest.raises(CredentialFileError, match="readable by others"):
        start_gateway({"upstreams": [{"url": "http://127.0.0.1:9", "bearerTokenFile": str(path)}]})
    with pytest.raises(CredentialFileError, match="cannot read"):
        start_gateway(
            {"upstreams": [{"url": "http://127.0.0.1:9", "bearerTokenFile": str(path) + ".x"}]}
        )


def test_the_flag_names_the_route(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["serve", "--upstream", "/api/v1=http://127.0.0.1:9",
         "--upstream-token-file", "/api/v1=/run/a=b/token"]
    )  # fmt: skip
    assert overrides_from_args(args)["upstreams"] == [
        {"prefix": "/api/v1", "url": "http://127.0.0.1:9", "bearerTokenFile": "/run/a=b/token"}
    ]
    bad = parser.parse_args(
        ["serve", "--upstream", "http://127.0.0.1:9", "--upstream-token-file", "/api=/t"]
    )
    with pytest.raises(ValueError, match="--upstream-token-file /api=/t: no --upstream"):
        overrides_from_args(bad)
