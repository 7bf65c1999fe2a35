"""The HTTPS listener and client-certificate authentication, on real sockets with real
certificates made by the test (``tests/support/certs.py``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.server import Gateway
from gateway.serving.tls import bound_handshakes, certificate_names
from gateway.settings.sources import ConfigLoadError, load_config
from tests.frontdoor.conftest import ServerThread
from tests.support.certs import Issued, issue, make_ca
from tests.support.ports import free_port
from tests.support.wait import wait_until


@dataclass
class PKI:
    dir: Path
    ca: Issued
    server: Issued
    alice: Issued  # CN alice, O dev, ops
    proxy: Issued  # the front proxy's certificate (its own CA)
    proxy_ca: Issued
    other_ca: Issued


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d, "ca")
    proxy_ca = make_ca(d, "proxy-ca")
    return PKI(
        dir=d,
        ca=ca,
        server=issue(
            ca, d, "server", cn="gateway", dns=("localhost",), ips=("127.0.0.1",), usage="server"
        ),
        alice=issue(ca, d, "alice", cn="alice", orgs=("dev", "ops")),
        proxy=issue(proxy_ca, d, "front-proxy", cn="front-proxy"),
        proxy_ca=proxy_ca,
        other_ca=make_ca(d, "other-ca"),
    )


def start_tls(overrides: dict[str, Any], header_timeout: float = 30.0) -> ServerThread:
    loaded = load_config([], overrides)

    def make(loop: asyncio.AbstractEventLoop) -> Gateway:
        bound_handshakes(loop, header_timeout)  # what `serve` does
        return Gateway(loaded, loop=loop)

    return ServerThread(make).start()


def tls_overrides(pki: PKI, upstream: ServerThread, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "upstreams": [{"url": upstream.url}],
        "tls": {"certFile": str(pki.server.cert_file),
                "privateKeyFile": str(pki.server.key_file)},
        "authentication": {"clientCAFile": str(pki.ca.cert_file)},
    }  # fmt: skip
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


@pytest.fixture
def gateway(pki: PKI, upstream: ServerThread) -> Iterator[ServerThread]:
    gw = start_tls(tls_overrides(pki, upstream))
    yield gw
    gw.stop()


def client_context(pki: PKI, cert: Issued | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca.cert_file)
    if cert is not None:
        ctx.load_cert_chain(cert.cert_file, cert.key_file)
    return ctx


def echo(port: int, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.get(f"https://127.0.0.1:{port}/echo", verify=ctx, headers=headers, timeout=10)


def upstream_headers(response: httpx.Response) -> dict[str, list[str]]:
    assert response.status_code == 200, response.text
    out: dict[str, list[str]] = {}
    for k, v in response.json()["headers"]:
        out.setdefault(k.lower(), []).append(v)
    return out


def test_https_proxies_with_forwarded_proto(pki: PKI, gateway: ServerThread) -> None:
    seen = upstream_headers(echo(gateway.port, client_context(pki)))
    assert seen["x-forwarded-proto"] == ["https"]
    assert seen["x-remote-user"] == ["system:anonymous"]


def test_client_certificate_authenticates_cn_and_groups(pki: PKI, gateway: ServerThread) -> None:
    seen = upstream_headers(echo(gateway.port, client_context(pki, pki.alice)))
    assert seen["x-remote-user"] == ["alice"]
    assert seen["x-remote-group"] == ["dev", "ops", "system:authenticated"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_with_client_certificate(pki: PKI, gateway: ServerThread) -> None:
    out = subprocess.run(
        ["curl", "-sS", "--cacert", str(pki.ca.cert_file), "--cert", str(pki.alice.cert_file),
         "--key", str(pki.alice.key_file), f"https://127.0.0.1:{gateway.port}/x"],
        capture_output=True, check=True, timeout=30,
    )  # fmt: skip
    headers = {k.lower(): v for k, v in json.loads(out.stdout)["headers"]}
    assert headers["x-remote-user"] == "alice"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_http2_by_alpn_with_client_certificate(pki: PKI, gateway: ServerThread) -> None:
    """Issue 22's "done means": curl --http2 with alice's certificate reaches the upstream as
    alice, over HTTP/2 negotiated by ALPN (the upstream hop stays HTTP/1.1)."""
    out = subprocess.run(
        ["curl", "-sS", "--http2", "--cacert", str(pki.ca.cert_file),
         "--cert", str(pki.alice.cert_file), "--key", str(pki.alice.key_file),
         "-w", "\n%{http_version}", f"https://127.0.0.1:{gateway.port}/x"],
        capture_output=True, check=True, timeout=30,
    )  # fmt: skip
    body, _, version = out.stdout.decode().rpartition("\n")
    assert version == "2"
    headers = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert headers["x-remote-user"] == "alice"
    assert headers["x-forwarded-proto"] == "https"


def test_alpn_offers_h2_then_http1(pki: PKI, gateway: ServerThread) -> None:
    """A client offering only http/1.1 still gets it; one offering h2 gets h2."""
    for offered, chosen in ((["http/1.1"], "http/1.1"), (["h2", "http/1.1"], "h2")):
        ctx = client_context(pki)
        ctx.set_alpn_protocols(offered)
        with (
            socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.selected_alpn_protocol() == chosen


@pytest.mark.parametrize("kind", ["unknown-ca", "expired", "server-usage"])
def test_certificate_that_does_not_verify_is_401(
    kind: str, pki: PKI, gateway: ServerThread
) -> None:
    if kind == "unknown-ca":
        cert = issue(pki.other_ca, pki.dir, "mallory", cn="alice", orgs=("system:masters",))
    elif kind == "expired":
        cert = issue(pki.ca, pki.dir, "old", cn="alice", expired=True)
    else:
        cert = issue(pki.ca, pki.dir, "srv-only", cn="alice", usage="server")
    response = echo(gateway.port, client_context(pki, cert))
    assert response.status_code == 401
    assert response.json()["reason"] == "Unauthorized"
    message = response.json()["message"]
    assert message.startswith("Unauthorized: client certificate: ")
    assert {"unknown-ca": "unknown authority", "expired": "not valid at",
            "server-usage": "EKU"}[kind] in message  # fmt: skip


def test_rejected_certificate_lets_a_valid_token_through(
    pki: PKI, upstream: ServerThread, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('tok-bob,bob,uid-bob,"team"\n')
    gw = start_tls(tls_overrides(pki, upstream, authentication={"tokenAuthFile": str(tokens)}))
    try:
        stranger = issue(pki.other_ca, pki.dir, "stranger", cn="stranger")
        ctx = client_context(pki, stranger)
        seen = upstream_headers(echo(gw.port, ctx, {"Authorization": "Bearer tok-bob"}))
        assert seen["x-remote-user"] == ["bob"]  # kube's union: the next authenticator
        # No certificate: the token file as before.
        seen = upstream_headers(
            echo(gw.port, client_context(pki), {"Authorization": "Bearer tok-bob"})
        )
        assert seen["x-remote-user"] == ["bob"]
    finally:
        gw.stop()


def test_front_proxy_identity_needs_its_certificate(pki: PKI, upstream: ServerThread) -> None:
    rh = {"requestHeader": {"clientCAFile": str(pki.proxy_ca.cert_file),
                            "allowedNames": ["front-proxy"]}}  # fmt: skip
    gw = start_tls(tls_overrides(pki, upstream, authentication=rh))
    claimed = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    try:
        seen = upstream_headers(echo(gw.port, client_context(pki, pki.proxy), claimed))
        assert seen["x-remote-user"] == ["admin"]
        assert seen["x-remote-group"] == ["system:masters", "system:authenticated"]
        # alice's certificate verifies against the client CA, not the front-proxy one: the
        # headers are dropped and she is herself.
        seen = upstream_headers(echo(gw.port, client_context(pki, pki.alice), claimed))
        assert seen["x-remote-user"] == ["alice"]
        # Verified by the front-proxy CA but not an allowed name: not a front proxy, and not
        # a client the client CA knows either, so 401 (kube-apiserver's union of the two).
        other = issue(pki.proxy_ca, pki.dir, "other-proxy", cn="other-proxy")
        refused = echo(gw.port, client_context(pki, other), claimed)
        assert refused.status_code == 401
        assert "unknown authority" in refused.json()["message"]
        # No certificate at all, from loopback.
        seen = upstream_headers(echo(gw.port, client_context(pki), claimed))
        assert seen["x-remote-user"] == ["system:anonymous"]
    finally:
        gw.stop()


def served_certificate(port: int, pki: PKI, server_name: str | None) -> x509.Certificate:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value)


def test_sni_selects_certificates(pki: PKI, upstream: ServerThread) -> None:
    d = pki.dir
    named = issue(pki.ca, d, "named", cn="named.example", dns=("a.example", "*.wild.example"),
                  usage="server")  # fmt: skip
    explicit = issue(pki.ca, d, "explicit", cn="explicit", usage="server")
    sni = [
        {"certFile": str(named.cert_file), "keyFile": str(named.key_file)},
        {"certFile": str(explicit.cert_file), "keyFile": str(explicit.key_file),
         "names": ["b.example", "a.example"]},
    ]  # fmt: skip
    gw = start_tls(tls_overrides(pki, upstream, tls={"sniCertKeys": sni}))
    try:
        expected = {
            None: "gateway", "unknown.example": "gateway", "named.example": "named.example",
            "x.wild.example": "named.example", "y.x.wild.example": "gateway",
            "wild.example": "gateway", "b.example": "explicit",
            # explicit names beat names read from a certificate
            "a.example": "explicit",
        }  # fmt: skip
        for name, want in expected.items():
            assert cn(served_certificate(gw.port, pki, name)) == want, name
    finally:
        gw.stop()


def test_min_version(pki: PKI, upstream: ServerThread) -> None:
    gw = start_tls(tls_overrides(pki, upstream, tls={"minVersion": "VersionTLS13"}))
    try:
        old = client_context(pki)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(httpx.ConnectError):
            echo(gw.port, old)
        assert echo(gw.port, client_context(pki)).status_code == 200
    finally:
        gw.stop()
    # The default: TLS 1.2 is accepted, 1.1 is not.
    gw = start_tls(tls_overrides(pki, upstream))
    try:
        ctx = client_context(pki)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        assert echo(gw.port, ctx).status_code == 200
    finally:
        gw.stop()


def read_until_closed(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def test_stalled_handshake_is_cut_by_header_timeout(pki: PKI, upstream: ServerThread) -> None:
    gw = start_tls(tls_overrides(pki, upstream), header_timeout=0.5)
    try:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            # recv blocks until the server closes (the socket timeout bounds the wait)
            assert read_until_closed(sock) == b""
    finally:
        gw.stop()


def test_plain_http_to_tls_port_is_closed(pki: PKI, gateway: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"HTTP/1.1" not in read_until_closed(sock)
    # and the listener goes on serving
    assert echo(gateway.port, client_context(pki)).status_code == 200


def test_names_from_certificate(pki: PKI) -> None:
    cert = issue(pki.ca, pki.dir, "n", cn="cn.example", dns=("san.example",), ips=("10.0.0.1",))
    assert certificate_names(cert.cert) == ["cn.example", "san.example"]
    ip_cn = issue(pki.ca, pki.dir, "ipcn", cn="10.1.2.3", dns=("x.example",))
    assert certificate_names(ip_cn.cert) == ["x.example"]


def serve_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:1", *args],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_bad_files_exit_2_with_one_line(pki: PKI, tmp_path: Path) -> None:
    missing = serve_cli(["--tls-cert-file", str(tmp_path / "nope.pem"),
                         "--tls-private-key-file", str(pki.server.key_file)])  # fmt: skip
    assert missing.returncode == 2
    assert len(missing.stderr.strip().splitlines()) == 1
    assert "nope.pem: cannot read" in missing.stderr
    mismatched = serve_cli(["--tls-cert-file", str(pki.server.cert_file),
                            "--tls-private-key-file", str(pki.alice.key_file)])  # fmt: skip
    assert mismatched.returncode == 2
    assert len(mismatched.stderr.strip().splitlines()) == 1
    assert "does not match" in mismatched.stderr


def test_rotation_without_restart(pki: PKI, upstream: ServerThread, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(pki.server.cert_file.read_bytes())
    key.write_bytes(pki.server.key_file.read_bytes())
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--listen", f"127.0.0.1:{port}",
         "--upstream", upstream.url, "--tls-cert-file", str(cert), "--tls-private-key-file",
         str(key), "--config-poll-interval", "0.1", "--log-level", "warning"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: _served_cn(port, pki) == "gateway", 30, "the HTTPS listener")
        ctx = client_context(pki)
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as kept,
        ):
            assert _get(kept).startswith(b"HTTP/1.1 200 ")
            rotated = issue(pki.ca, pki.dir, "rotated", cn="rotated", ips=("127.0.0.1",),
                            usage="server")  # fmt: skip
            # A half-done rotation (new certificate, old key) is refused; the old pair serves.
            cert.write_bytes(rotated.cert_file.read_bytes())
            wait_until(lambda: _failures(port, pki) >= 1, 30, "the refused reload")
            assert _served_cn(port, pki) == "gateway"
            key.write_bytes(rotated.key_file.read_bytes())
            wait_until(lambda: _served_cn(port, pki) == "rotated", 30, "the rotated certificate")
            # The connection opened before goes on.
            assert _get(kept).startswith(b"HTTP/1.1 200 ")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    # One log record per refused reload: the reason, then the file and what is wrong.
    assert "reload refused (credentials)" in err
    assert f"{cert}, {key}: the private key does not match the certificate" in err


def _get(sock: ssl.SSLSocket) -> bytes:
    """One keep-alive exchange: /release answers ``ok`` (2 bytes)."""
    sock.sendall(b"GET /release/x HTTP/1.1\r\nHost: x\r\n\r\n")
    out = b""
    while not out.endswith(b"\r\n\r\nok"):
        chunk = sock.recv(65536)
        assert chunk, out
        out += chunk
    return out


def _served_cn(port: int, pki: PKI) -> str | None:
    try:
        return cn(served_certificate(port, pki, None))
    except OSError:
        return None


def _failures(port: int, pki: PKI) -> float:
    text = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=False, timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_config_reload_failures_total") and "credentials" in line
    )


def test_client_ca_bundle_reloads(pki: PKI, upstream: ServerThread, tmp_path: Path) -> None:
    bundle = tmp_path / "client-ca.pem"
    bundle.write_bytes(pki.ca.cert_file.read_bytes())
    overrides = tls_overrides(pki, upstream, authentication={"clientCAFile": str(bundle)})
    gw = start_tls(overrides)
    try:
        ctx = client_context(pki, pki.alice)
        with httpx.Client(verify=ctx, timeout=10) as client:  # one kept-alive connection
            url = f"https://127.0.0.1:{gw.port}/echo"
            assert upstream_headers(client.get(url))["x-remote-user"] == ["alice"]
            bundle.write_bytes(pki.other_ca.cert_file.read_bytes())
            reloaded = load_config([], overrides)
            gw.call(lambda: gw.app.apply(reloaded))
            # The open connection is verified again against the new bundle.
            refused = client.get(url)
            assert refused.status_code == 401
            assert "unknown authority" in refused.json()["message"]
    finally:
        gw.stop()


def test_tls_flags() -> None:
    args = build_parser().parse_args([
        "serve", "--tls-cert-file", "c.pem", "--tls-private-key-file", "k.pem",
        "--tls-sni-cert-key", "a.pem,a-key.pem", "--tls-sni-cert-key", "b.pem,b-key.pem:b.x,*.y",
        "--tls-min-version", "VersionTLS13", "--client-ca-file", "ca.pem",
        "--requestheader-client-ca-file", "fp.pem", "--requestheader-allowed-names", "p1,p2",
    ])  # fmt: skip
    s = load_config([], overrides_from_args(args)).settings
    assert (s.tls.cert_file, s.tls.private_key_file, s.tls.min_version) == (
        "c.pem", "k.pem", "VersionTLS13",
    )  # fmt: skip
    assert [(p.cert_file, p.key_file, p.names) for p in s.tls.sni_cert_keys] == [
        ("a.pem", "a-key.pem", ()), ("b.pem", "b-key.pem", ("b.x", "*.y")),
    ]  # fmt: skip
    rh = s.authentication.request_header
    assert (s.authentication.client_ca_file, rh.client_ca_file, rh.allowed_names) == (
        "ca.pem", "fp.pem", ("p1", "p2"),
    )  # fmt: skip
    with pytest.raises(ValueError, match="expected CERT,KEY"):
        overrides_from_args(build_parser().parse_args(["serve", "--tls-sni-cert-key", "a.pem"]))
    with pytest.raises(ConfigLoadError) as exc:
        load_config([], {"tls": {"certFile": "c"}, "authentication": {
            "requestHeader": {"allowedNames": ["x"]}}})  # fmt: skip
    text = "\n".join(exc.value.errors)
    assert "tls: certFile and privateKeyFile go together" in text
    assert "allowedNames: needs clientCAFile" in text
    with pytest.raises(ConfigLoadError, match="need the TLS listener"):
        load_config([], {"authentication": {"clientCAFile": "ca.pem"}})
