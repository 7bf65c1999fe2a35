"""``https://`` upstreams: verified against the system CAs or a CA file, the name checked,
a client certificate presented; on every transport. Real TLS upstream, real certificates."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.proxy.upstream_tls import UpstreamTLS
from gateway.settings.sources import ConfigLoadError, load_config
from tests.frontdoor.conftest import start_gateway
from tests.frontdoor.framing_upstream import RecordingUpstream, recording_upstream
from tests.support.certs import Issued, issue, make_ca

TRANSPORTS = ["h1", "aiohttp", "httpx", "httpx-aiohttp"]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Issued:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def up(ca: Issued, tmp_path: Path) -> Iterator[RecordingUpstream]:
    """An HTTPS upstream whose certificate names only ``upstream.internal``."""
    server = issue(ca, tmp_path, "upstream", cn="upstream", dns=("upstream.internal",),
                   usage="server")  # fmt: skip
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(server.cert_file, server.key_file)
    with recording_upstream(ctx) as u:
        yield u


def status(up: RecordingUpstream, transport: str, tls: dict[str, Any], **proxy: Any) -> int:
    gw = start_gateway({
        "upstreams": [{"url": up.url, "tls": tls} if tls else {"url": up.url}],
        "enablePriorityAndFairness": False, "proxy": {"transport": transport, **proxy},
    })  # fmt: skip
    try:
        return httpx.get(gw.url + "/x", timeout=30).status_code
    finally:
        gw.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_verification(transport: str, up: RecordingUpstream, ca: Issued, tmp_path: Path) -> None:
    ca_file = str(ca.cert_file)
    # Not in the system's CAs, and the URL's 127.0.0.1 is not the certificate's name.
    assert status(up, transport, {}) == 502
    assert status(up, transport, {"caFile": ca_file}) == 502
    assert status(up, transport, {"caFile": ca_file, "serverName": "upstream.internal"}) == 200
    assert status(up, transport, {"serverName": "upstream.internal"},
                  upstreamCAFile=ca_file) == 200  # fmt: skip
    other = make_ca(tmp_path, "other")
    assert status(up, transport, {"caFile": str(other.cert_file),
                                  "serverName": "upstream.internal"}) == 502  # fmt: skip
    assert status(up, transport, {"insecureSkipVerify": True}) == 200
    # Only the verified connections carried a request.
    assert len([r for r in up.requests() if r.path == "/x"]) == 3


def test_settings_errors(ca: Issued, tmp_path: Path) -> None:
    with pytest.raises(ConfigLoadError) as exc:
        load_config([], {"upstreams": [
            {"url": "http://a", "tls": {"caFile": "x"}},
            {"url": "https://b", "tls": {"certFile": "c"}},
        ]})  # fmt: skip
    text = "\n".join(exc.value.errors)
    assert "upstreams[0].tls: only for https:// upstreams" in text
    assert "upstreams[1].tls: certFile and keyFile go together" in text
    loaded = load_config([], {"upstreams": [
        {"url": "https://b", "tls": {"caFile": str(tmp_path / "missing.pem")}}]})  # fmt: skip
    with pytest.raises(ValueError, match=r"upstreams\[0\]\.tls\.caFile .*missing\.pem"):
        UpstreamTLS(loaded.settings)
