"""HTTP/2 from clients (``client.http2``): h2c with prior knowledge on a real ``serve`` stack
(uvloop), streams through the same admission path, and the limits that bound the known HTTP/2
denial-of-service attacks, sent as raw frames by the ``h2`` library."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.settings import SettingCodes

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.server import Gateway
from gateway.serving.h2_limits import PREFACE, ResetBudget, preface_state, speaks_http2
from gateway.serving.h2_select import http2_mixin
from gateway.serving.protocol import protocol_class
from gateway.settings.sources import ConfigLoadError, load_config
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, holding
from tests.frontdoor.h2_client import BOUND, H2Client
from tests.frontdoor.test_client_timeouts import TIMEOUT, closed, start
from tests.support.wait import wait_until

APF_CONFIG = str(Path(__file__).with_name("apf_config.yaml"))


def h2c(
    upstream: ServerThread,
    paths: list[str] | None = None,
    client: dict[str, Any] | None = None,
    **http2: Any,
) -> ServerThread:
    return start(upstream, "zttp", paths, **(client or {}),
                 http2={"priorKnowledge": True, **http2})  # fmt: skip


def served(
    upstream: ServerThread, gateways: list[ServerThread], *args: Any, **http2: Any
) -> tuple[ServerThread, H2Client]:
    """A gateway (``h2c``'s arguments) torn down with ``gateways``, and a client on it."""
    gateways.append(h2c(upstream, *args, **http2))
    return gateways[-1], H2Client(gateways[-1].port)


@pytest.fixture
def gw(upstream: ServerThread, gateways: list[ServerThread]) -> ServerThread:
    gateways.append(h2c(upstream))
    return gateways[-1]


@pytest.fixture
def client(gw: ServerThread) -> Iterator[H2Client]:
    c = H2Client(gw.port)
    yield c
    c.close()


def response(c: H2Client, sid: int) -> tuple[int, bytes]:
    """The status and body of stream ``sid``."""
    head = c.wait_for(lambda e: isinstance(e, ResponseReceived) and e.stream_id == sid, "head")
    c.wait_for(lambda e: isinstance(e, StreamEnded) and e.stream_id == sid, "end of stream")
    assert isinstance(head, ResponseReceived) and head.headers is not None
    status = int(dict(head.headers)[b":status"])
    body = b"".join(e.data or b"" for e in c.events
                    if isinstance(e, DataReceived) and e.stream_id == sid)  # fmt: skip
    return status, body


def reset_of(c: H2Client, sid: int) -> int:
    event = c.wait_for(lambda e: isinstance(e, StreamReset) and e.stream_id == sid, "RST_STREAM")
    assert isinstance(event, StreamReset)
    return int(event.error_code)


# Protocol selection


def test_protocol_selection() -> None:
    assert speaks_http2("h2")
    assert not speaks_http2("http/1.1")
    assert not speaks_http2(None)
    assert preface_state(PREFACE + b"x") is True
    assert preface_state(PREFACE[:5]) is None
    assert preface_state(b"GET / HTTP/1.1\r\n") is False
    assert preface_state(b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n") is False


def test_h2c_request_goes_through_the_gateway(gw: ServerThread) -> None:
    with httpx.Client(http1=False, http2=True, timeout=BOUND) as c:
        r = c.get(gw.url + "/echo/a%20b?x=1", headers={"x-test": "v"})
    assert r.status_code == 200
    assert r.http_version == "HTTP/2"
    doc = r.json()
    assert doc["path"] == "/echo/a b" and doc["query"] == "x=1"
    headers = dict(doc["headers"])
    assert headers["x-test"] == "v"
    assert headers["x-forwarded-host"] == f"127.0.0.1:{gw.port}"  # :authority, as Host
    # Classified and admitted as any request: the APF headers come back.
    assert "x-kubernetes-pf-prioritylevel-uid" in r.headers


def test_h2c_on_httptools(upstream: ServerThread, gateways: list[ServerThread]) -> None:
    gateways.append(start(upstream, "httptools", http2={"priorKnowledge": True}))
    with httpx.Client(http1=False, http2=True, timeout=BOUND) as c:
        r = c.get(gateways[-1].url + "/echo")
    assert (r.status_code, r.http_version) == (200, "HTTP/2")
    assert httpx.get(gateways[-1].url + "/echo", timeout=BOUND).http_version == "HTTP/1.1"


def test_http11_still_served_on_an_h2c_listener(gw: ServerThread) -> None:
    # A head sent a byte at a time goes through the preface check to HTTP/1.1.
    with socket.create_connection(("127.0.0.1", gw.port), timeout=BOUND) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in b"PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n":
            s.sendall(bytes([byte]))
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert httpx.get(gw.url + "/echo", timeout=BOUND).status_code == 200


def test_h2c_is_off_by_default(upstream: ServerThread, gateways: list[ServerThread]) -> None:
    gateways.append(start(upstream, "zttp"))
    with socket.create_connection(("127.0.0.1", gateways[-1].port), timeout=BOUND) as s:
        s.sendall(PREFACE)
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 4")  # not a SETTINGS frame


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_http2_prior_knowledge(gw: ServerThread) -> None:
    out = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_version}",
         "--max-time", str(BOUND), gw.url + "/echo"],
        capture_output=True, check=True, text=True,
    )  # fmt: skip
    body, _, version = out.stdout.rpartition("\n")
    assert version == "2"
    assert json.loads(body)["path"] == "/echo"


def test_many_streams_on_one_connection_are_served_at_once(
    gw: ServerThread, client: H2Client, upstream: ServerThread
) -> None:
    sids = [client.request(f"/hold/s{i}") for i in range(5)]
    wait_until(lambda: len(holding(upstream)) == 5, what="5 streams held upstream at once")
    for i in range(5):
        httpx.get(f"{upstream.url}/release/s{i}", timeout=BOUND)
    for i, sid in enumerate(sids):
        assert response(client, sid) == (200, f"released s{i}".encode())


def test_each_stream_is_its_own_user(upstream: ServerThread, gateways: list[ServerThread]) -> None:
    # Streams of one connection are authenticated (and so classified into flows) one by one,
    # as requests on separate connections are: here by front-proxy headers from 127.0.0.0/8.
    trusted = {"requestHeader": {"allowedCIDRs": ["127.0.0.0/8"]}}
    gateways.append(start(upstream, "zttp", http2={"priorKnowledge": True}))
    gw = gateways[-1]
    overrides = {"upstreams": [{"url": upstream.url}], "authentication": trusted,
                 "client": {"http2": {"priorKnowledge": True}}}  # fmt: skip
    gw.call(lambda: gw.app.apply(load_config([], overrides)))
    c = H2Client(gw.port)
    users = {c.request("/echo", extra=[("x-remote-user", user)]): user
             for user in ("alice", "bob", "carol")}  # fmt: skip
    for sid, user in users.items():
        status, body = response(c, sid)
        seen = dict(json.loads(body)["headers"])
        assert (status, seen["x-remote-user"]) == (200, user)
    c.close()


# Limits


def test_streams_over_the_limit_are_refused(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    _, c = served(upstream, gateways, maxStreamsPerConnection=2)
    # Sent before the client read (and acknowledged) the limit: the third is refused.
    a, b, third = (c.request(f"/hold/m{i}") for i in range(3))
    settings = c.wait_for(lambda e: isinstance(e, RemoteSettingsChanged), "SETTINGS")
    assert isinstance(settings, RemoteSettingsChanged)
    assert settings.changed_settings[SettingCodes.MAX_CONCURRENT_STREAMS].new_value == 2
    assert reset_of(c, third) == ErrorCodes.REFUSED_STREAM
    wait_until(lambda: {"m0", "m1"} <= set(holding(upstream)), what="two streams held")
    for key in ("m0", "m1"):
        httpx.get(f"{upstream.url}/release/{key}", timeout=BOUND)
    assert response(c, a)[0] == response(c, b)[0] == 200
    c.close()


def test_reset_stream_releases_its_seat(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    # tiny-queue has one seat: one request executes, the next waits in its queue. Resetting
    # the waiting stream leaves the queue at once.
    gw, c = served(upstream, gateways, [APF_CONFIG])
    level = gw.app.controller.levels["tiny-queue"].qs
    running = c.request("/queue/hold/r1")
    wait_until(lambda: "r1" in holding(upstream), what="the first stream executing")
    queued = c.request("/queue/hold/r2")
    wait_until(lambda: gw.call(lambda: level.tot_requests_waiting) == 1, what="one queued")
    c.conn.reset_stream(queued, ErrorCodes.CANCEL)
    c.flush()
    wait_until(lambda: gw.call(lambda: level.tot_requests_waiting) == 0, what="queue left")
    assert gw.call(lambda: level.tot_seats_in_use) == 1
    # An executing request whose client left ends as on HTTP/1: when its upstream answers
    # (the answer is dropped), its seat goes back.
    c.conn.reset_stream(running, ErrorCodes.CANCEL)
    c.flush()
    httpx.get(upstream.url + "/release/r1", timeout=BOUND)
    wait_until(lambda: gw.call(lambda: level.tot_seats_in_use) == 0, what="seat released")
    assert gw.call(lambda: level.tot_requests_executing) == 0
    # The connection goes on.
    assert response(c, c.request("/echo"))[0] == 200
    c.close()


def test_rapid_reset_gets_goaway_enhance_your_calm(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw, c = served(upstream, gateways, maxResetStreams=5)
    try:
        # The attack in one write, as a flooding client sends it: flushing each pair lets the
        # gateway's GOAWAY and close land between two writes (a broken pipe here, not a
        # failure of the gateway), and data left unread at the close would turn it into a reset.
        headers = [(":method", "GET"), (":path", "/hold/never"), (":scheme", "http"),
                   (":authority", "gw.test")]  # fmt: skip
        for _ in range(20):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, headers, end_stream=True)
            c.conn.reset_stream(sid, ErrorCodes.CANCEL)
        c.flush()
        assert c.goaway().error_code == ErrorCodes.ENHANCE_YOUR_CALM
        c.wait_closed()
        assert closed(gw, "http2_rapid_reset") == 1
    finally:
        c.close()


def test_reset_budget_window() -> None:
    clock = FakeEventClock()
    budget = ResetBudget(3, 10.0, clock.now)
    assert all(budget.spend() for _ in range(3))
    assert not budget.spend()
    clock.advance(10.0)
    assert all(budget.spend() for _ in range(3))


def test_continuation_flood_is_bounded_by_max_header_bytes(
    gw: ServerThread, client: H2Client
) -> None:
    # A header block that never ends: HEADERS without END_HEADERS, then CONTINUATIONs. h2 alone
    # waits for 64 frames; the gateway stops at client.maxHeaderBytes (4096 here).
    client.read()
    head = client.conn.encoder.encode([(b":method", b"GET"), (b":path", b"/echo"),
                                       (b":scheme", b"http"), (b":authority", b"x")])  # fmt: skip
    frames = _frame(0x1, 0, 1, head)  # HEADERS, no flags
    junk = client.conn.encoder.encode([(b"x-junk", b"j" * 1500)])
    for _ in range(4):
        frames += _frame(0x9, 0, 1, junk)  # CONTINUATION, no END_HEADERS
    client.sock.sendall(frames)
    assert client.goaway().error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert closed(gw, "http2_protocol_error") == 1


def test_header_list_over_max_header_bytes_is_refused(gw: ServerThread, client: H2Client) -> None:
    # Huffman-coded, 5000 'a's take ~3.1 KB on the wire and 5000 bytes decoded.
    client.request("/echo", extra=[("x-big", "a" * 5000)])
    assert client.goaway().error_code == ErrorCodes.ENHANCE_YOUR_CALM


def test_hpack_table_larger_than_allowed_is_refused(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    _, c = served(upstream, gateways, headerTableSize=1024)
    c.wait_for(lambda e: isinstance(e, RemoteSettingsChanged), "SETTINGS")
    c.conn.encoder.header_table_size = 4096  # a table size update past what we allow
    c.request("/echo")
    assert c.goaway().error_code == ErrorCodes.PROTOCOL_ERROR  # h2's code for HPACK errors
    c.close()


def test_ping_flood_from_a_client_that_does_not_read_is_cut(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    # A client that does not read while its PINGs make the gateway queue ACKs: a response it
    # opened a wide window for fills the socket first, then the queued ACKs are counted.
    slow = {"sendTimeout": 60, "headerTimeout": 60, "keepAliveTimeout": 60}
    gw = h2c(upstream, client=slow, maxControlFrames=50)
    gateways.append(gw)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(BOUND)
    sock.connect(("127.0.0.1", gw.port))
    c = H2Client(gw.port, sock=sock)
    c.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
    c.conn.increment_flow_control_window(2**31 - 1 - 65535)
    c.request("/stream/300000")  # ~6 MB of small DATA frames

    def paused() -> bool:
        assert gw.server is not None
        conns = gw.call(lambda: list(gw.server.server_state.connections))
        return any(getattr(p, "write_paused", False) for p in conns)

    wait_until(paused, what="the gateway's writing paused")
    ping = _frame(0x6, 0, 0, b"12345678")
    sock.sendall(ping * 100)
    wait_until(lambda: closed(gw, "http2_control_flood") == 1, what="closed for the flood")
    c.close()


def test_body_timeout_resets_the_stream_not_the_connection(
    gw: ServerThread, client: H2Client
) -> None:
    silent = client.request("/upload", method="POST", end=False)
    assert reset_of(client, silent) == ErrorCodes.CANCEL
    assert response(client, client.request("/echo"))[0] == 200
    assert closed(gw, "body_timeout") == 1


def test_idle_connection_gets_goaway(gw: ServerThread, client: H2Client) -> None:
    assert response(client, client.request("/echo"))[0] == 200
    assert client.goaway(within=TIMEOUT + BOUND).error_code == ErrorCodes.NO_ERROR
    client.wait_closed()


def test_pings_do_not_keep_a_connection_without_requests_open(
    gw: ServerThread, client: H2Client
) -> None:
    # headerTimeout (0.3 s) runs from accept until the first request; PINGs do not reset it.
    started = time.monotonic()
    while time.monotonic() - started < BOUND:
        if any(isinstance(e, ConnectionTerminated) for e in client.read(0.05)):
            break
        client.conn.ping(b"12345678")
        client.flush()
    assert client.goaway(within=0).error_code == ErrorCodes.NO_ERROR
    assert closed(gw, "header_timeout") == 1


def test_unfinished_header_block_is_cut_by_the_header_timeout(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    # The idle (keep-alive) timeout is made long, so that on a loaded machine it cannot win
    # the race with the header timeout this test is about.
    gateways.append(h2c(upstream, client={"keepAliveTimeout": 60}))
    gw = gateways[-1]
    client = H2Client(gw.port)
    try:
        assert response(client, client.request("/echo"))[0] == 200  # past the first request
        head = [(b":method", b"GET"), (b":path", b"/echo"), (b":scheme", b"http"),
                (b":authority", b"x")]  # fmt: skip
        block = client.conn.encoder.encode(head)
        client.sock.sendall(_frame(0x1, 0, 3, block))  # HEADERS without END_HEADERS, then nothing
        assert client.goaway().error_code == ErrorCodes.NO_ERROR
        wait_until(lambda: closed(gw, "header_timeout") == 1, what="the header-timeout close")
    finally:
        client.close()


def test_shutdown_sends_goaway_and_lets_running_streams_finish(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = h2c(upstream)
    c = H2Client(gw.port)
    sid = c.request("/hold/g")
    wait_until(lambda: "g" in holding(upstream), what="the stream held upstream")
    with ThreadPoolExecutor(1) as pool:
        stopping = pool.submit(gw.stop)
        assert c.goaway().error_code == ErrorCodes.NO_ERROR
        httpx.get(upstream.url + "/release/g", timeout=BOUND)
        c.wait_closed()
        stopping.result()
    # The held stream's response (HEADERS, then DATA "released g" with END_STREAM) followed.
    raw = c.after_goaway or b""
    data = _frame(0x0, 0x1, sid, b"released g")
    assert data in raw or (_frame(0x0, 0x0, sid, b"released g") in raw), raw
    c.close()


def test_request_body_is_held_by_the_stream_window(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    _, c = served(upstream, gateways, initialWindowSize=16384)
    c.wait_for(lambda e: isinstance(e, RemoteSettingsChanged), "SETTINGS")
    size = 1 << 20
    sid = c.request("/upload", method="POST", end=False)
    left = size
    while left:
        window = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
        if not window:
            c.read()
            continue
        chunk = min(window, left)
        assert chunk <= 16384  # never more than the stream window the gateway advertised
        c.conn.send_data(sid, b"u" * chunk, end_stream=chunk == left)
        c.flush()
        left -= chunk
    status, body = response(c, sid)
    assert status == 200 and json.loads(body)["bytes"] == size
    # The window reopened as the gateway read the body, a window at a time.
    updates = [e for e in c.events if isinstance(e, WindowUpdated) and e.stream_id == sid]
    assert len(updates) >= size // 16384 - 1
    c.close()


def test_reload_keeps_h2c_until_a_restart(
    gw: ServerThread, upstream: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    off = {"upstreams": [{"url": upstream.url}], "client": {"http2": {"priorKnowledge": False}}}
    gw.call(lambda: gw.app.apply(load_config([], off)))
    assert "client.http2.priorKnowledge changed; it takes effect after a restart" in caplog.text
    c = H2Client(gw.port)
    assert response(c, c.request("/echo"))[0] == 200
    c.close()


def test_settings_and_flags(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--http2-prior-knowledge", "true", "--http2-max-streams-per-connection", "7"]
    )
    h = load_config([], overrides_from_args(args)).settings.client.http2
    assert (h.prior_knowledge, h.max_streams_per_connection) == (True, 7)
    f = tmp_path / "gw.yaml"
    f.write_text(
        "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\nclient:\n  http2: "
        "{maxStreamsPerConnection: 0, resetWindow: 0, initialWindowSize: 10}\n"
    )
    with pytest.raises(ConfigLoadError) as exc:
        load_config([f])
    text = "\n".join(exc.value.errors)
    for field in ("maxStreamsPerConnection", "resetWindow", "initialWindowSize"):
        assert f"client.http2.{field}:" in text


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes([kind, flags])
        + stream.to_bytes(4, "big")
        + (payload)
    )


class TlsGateway(ServerThread):
    """The gateway on a TLS listener offering h2 by ALPN (a throwaway certificate): what the
    TLS listener of ``serve`` does with ``http2_mixin``."""

    def __init__(self, upstream: ServerThread, cert: Path, key: Path) -> None:
        loaded = load_config([], {"upstreams": [{"url": upstream.url}]})
        super().__init__(lambda loop: Gateway(loaded, loop=loop))
        self.cert, self.key = cert, key

    def config(self) -> uvicorn.Config:
        config = super().config()
        config.ssl_certfile, config.ssl_keyfile = str(self.cert), str(self.key)
        limits = self.app.client_limits
        impl = self.app.settings.http_implementation
        config.http = protocol_class(impl, limits, http2=http2_mixin(False))
        return config


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_alpn_selects_http2_on_a_tls_listener(upstream: ServerThread, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    gw = TlsGateway(upstream, cert, key).start()
    try:
        url = f"https://127.0.0.1:{gw.port}/echo"
        with httpx.Client(http2=True, verify=ssl.create_default_context(cafile=cert)) as c:
            r = c.get(url, timeout=BOUND)
        assert (r.status_code, r.http_version) == (200, "HTTP/2")
        assert dict(r.json()["headers"])["x-forwarded-proto"] == "https"
        with httpx.Client(verify=ssl.create_default_context(cafile=cert)) as c:
            r = c.get(url, timeout=BOUND)
        assert (r.status_code, r.http_version) == (200, "HTTP/1.1")
    finally:
        gw.stop()
