"""Framing between client, proxy and upstream on real sockets: an exchange that did not end
exactly as framed never leaves its upstream connection in the pool (docs/frontdoor.md, "Proxy
framing and buffering").

The upstream (``recording_upstream``) parses with llhttp and records every request it read on
each connection, so these tests prove that no smuggled request reached it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.frontdoor.framing_upstream import RecordingUpstream, recording_upstream
from tests.support.certs import Issued, issue, make_ca
from tests.support.wait import wait_until

TRANSPORTS = ["h1", "aiohttp", "httpx", "httpx-aiohttp"]
# What an attacker puts in its own body, hoping the upstream parses it as a request.
SMUGGLED = (
    b"GET /x HTTP/1.1\r\nhost: upstream\r\nx-remote-user: admin\r\n"
    b"x-remote-group: system:masters\r\ncontent-length: 0\r\n\r\n"
)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Issued]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d)
    return {
        "ca": ca,
        "server": issue(ca, d, "upstream", cn="upstream", ips=("127.0.0.1",), usage="server"),
        "client": issue(ca, d, "gateway", cn="the-gateway"),
    }


@pytest.fixture(params=["http", "https"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def up(scheme: str, pki: dict[str, Issued]) -> Iterator[RecordingUpstream]:
    """Plain, or HTTPS that requires the gateway's client certificate (every framing test
    runs over TLS upstreams too)."""
    ctx = None
    if scheme == "https":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki["ca"].cert_file)
        ctx.load_cert_chain(pki["server"].cert_file, pki["server"].key_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
        UPSTREAM_TLS.update(
            caFile=str(pki["ca"].cert_file), certFile=str(pki["client"].cert_file),
            keyFile=str(pki["client"].key_file),
        )  # fmt: skip
    with recording_upstream(ctx) as u:
        yield u
    UPSTREAM_TLS.clear()


@pytest.fixture
def proxy_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, "gateway.proxy")
    return caplog


# The https upstream's settings (set by the ``up`` fixture).
UPSTREAM_TLS: dict[str, str] = {}


def gateway(up: RecordingUpstream, transport: str, **proxy: Any) -> ServerThread:
    upstream: dict[str, Any] = {"url": up.url}
    if up.tls is not None:
        upstream["tls"] = dict(UPSTREAM_TLS)
    return start_gateway({
        "upstreams": [upstream], "enablePriorityAndFairness": False,
        "proxy": {"transport": transport, **proxy},
    })  # fmt: skip


def connect(gw: ServerThread) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    return s


def read_response(s: socket.socket) -> tuple[bytes, bytes, bool]:
    """(head, body, complete): reads by Content-Length until EOF or the whole body."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        if not got:
            return data, b"", False
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        got = s.recv(65536)
        if not got:
            return head, body, False
        body += got
    return head, body, True


def exchange(gw: ServerThread, raw: bytes) -> tuple[bytes, bytes, bool]:
    with connect(gw) as s:
        s.sendall(raw)
        return read_response(s)


def post(path: str, body: bytes) -> bytes:
    return b"POST %b HTTP/1.1\r\nhost: gw\r\ncontent-length: %d\r\n\r\n%b" % (
        path.encode(), len(body), body,
    )  # fmt: skip


def send_and_leave(gw: ServerThread, raw: bytes) -> None:
    """Send ``raw`` (a request cut short) and go away."""
    with connect(gw) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)


def aborted(log: pytest.LogCaptureFixture) -> bool:
    return any("request aborted" in r.getMessage() for r in log.records)


def test_exchanges_share_one_pooled_upstream_connection(
    up: RecordingUpstream, transport: str, scheme: str
) -> None:
    """Pooling is the same over TLS, and a TLS upstream sees the gateway's client
    certificate (``upstreams[].tls.certFile``)."""
    gw = gateway(up, transport)
    try:
        for _ in range(3):
            head, reply, _ = exchange(gw, post("/pooled", b"x"))
            assert head.startswith(b"HTTP/1.1 200") and reply == b"POST /pooled", head
    finally:
        gw.stop()
    conns = up.conn_of("/pooled")
    assert len(conns) == 1 and len(conns[0].requests) == 3
    assert conns[0].client_cn == ("the-gateway" if scheme == "https" else "")


@pytest.mark.parametrize("pad", [32, 70_000], ids=["small-body", "streamed-body"])
def test_a_truncated_body_cannot_smuggle_a_request(
    up: RecordingUpstream, transport: str, pad: int, proxy_log: pytest.LogCaptureFixture
) -> None:
    """The attack: request 1 declares ``Content-Length: N`` and sends nothing; if its upstream
    connection were pooled, the upstream would read the head and padding of request 2 as the
    rest of that body, and the attacker's own body as a separate request."""
    gw = gateway(up, transport)
    try:
        body = b"A" * pad + SMUGGLED
        # The head the proxy writes for request 2 has a predictable length: measure it.
        head, reply, _ = exchange(gw, post("/victim", body))
        assert head.startswith(b"HTTP/1.1 200") and reply == b"POST /victim"
        raw = bytes(up.conn_of("/victim")[0].raw)
        swallowed = raw.index(b"\r\n\r\n") + 4 + pad
        send_and_leave(
            gw, b"POST /early HTTP/1.1\r\nhost: gw\r\ncontent-length: %d\r\n\r\n" % swallowed
        )
        # Either the upstream saw request 1 (and answered it early) or the proxy dropped it.
        wait_until(lambda: bool(up.conn_of("/early")) or aborted(proxy_log))
        wait_until(lambda: all(c.closed for c in up.conn_of("/early")))
        head, reply, _ = exchange(gw, post("/victim", body))
    finally:
        gw.stop()
    paths = [r.path for r in up.requests()]
    assert "/x" not in paths
    assert not any(("x-remote-user", "admin") in r.headers for r in up.requests())
    assert reply == b"POST /victim"
    assert not any(r.complete for r in up.requests() if r.path == "/early")


CUT_BODIES = {
    # Chunked, cut inside the first chunk: forwarding the part with a last-chunk would make
    # a truncated upload look whole.
    "chunked-first-chunk": b"transfer-encoding: chunked\r\n\r\n400\r\n" + b"c" * 10,
    "chunked-later-chunk": b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n400\r\n" + b"c" * 10,
    "length-small": b"content-length: 1000\r\n\r\n" + b"c" * 10,
    "length-streamed": b"content-length: 200000\r\n\r\n" + b"c" * 100_000,
}


@pytest.mark.parametrize("cut", sorted(CUT_BODIES))
def test_a_body_cut_short_aborts_the_upstream_request(
    up: RecordingUpstream, transport: str, cut: str, proxy_log: pytest.LogCaptureFixture
) -> None:
    gw = gateway(up, transport)
    try:
        send_and_leave(gw, b"POST /upload HTTP/1.1\r\nhost: gw\r\n" + CUT_BODIES[cut])
        wait_until(lambda: aborted(proxy_log))
        # The upstream connection that carried it (if any) is closed, not kept for reuse.
        wait_until(lambda: all(c.closed for c in up.conn_of("/upload")))
        _, reply, _ = exchange(gw, post("/after", b"ok"))
    finally:
        gw.stop()
    assert not any(r.complete for r in up.requests() if r.path == "/upload")
    assert reply == b"POST /after"


@pytest.mark.parametrize("kind", ["overlong-full", "overlong-partial", "overlong-late"])
def test_bytes_after_a_response_close_its_connection(
    up: RecordingUpstream, transport: str, kind: str
) -> None:
    gw = gateway(up, transport)
    try:
        head, first, complete = exchange(
            gw, b"GET /%b HTTP/1.1\r\nhost: gw\r\n\r\n" % kind.encode()
        )
        if kind == "overlong-late":
            # Bytes on an idle pooled connection: some clients only notice when they next
            # pick the connection, so check that it is closed then, not reused.
            wait_until(lambda: all(c.late_sent for c in up.conn_of("/" + kind)))
        else:
            wait_until(lambda: all(c.closed for c in up.conn_of("/" + kind)))
        _, second, _ = exchange(gw, b"GET /after HTTP/1.1\r\nhost: gw\r\n\r\n")
        wait_until(lambda: all(c.closed for c in up.conn_of("/" + kind)))
    finally:
        gw.stop()
    assert (head[:12], first, complete) == (b"HTTP/1.1 200", b"hello", True)
    assert second == b"GET /after"
    assert not set(map(id, up.conn_of("/" + kind))) & set(map(id, up.conn_of("/after")))


def test_a_client_that_leaves_mid_response_closes_the_upstream_connection(
    up: RecordingUpstream, transport: str
) -> None:
    gw = gateway(up, transport)
    try:
        with connect(gw) as s:
            s.sendall(b"GET /big/8000000 HTTP/1.1\r\nhost: gw\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
        wait_until(lambda: all(c.closed for c in up.conn_of("/big")))
        _, reply, _ = exchange(gw, b"GET /after HTTP/1.1\r\nhost: gw\r\n\r\n")
    finally:
        gw.stop()
    assert reply == b"GET /after"
    assert up.conn_of("/big") and up.conn_of("/big") != up.conn_of("/after")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("uvicorn.error"):
            # Filters on the logger apply to records logged there; mirror them here.
            if all(f.filter(record) for f in logging.getLogger("uvicorn.error").filters):
                self.lines.append(record)
        else:
            self.lines.append(record)


@pytest.mark.parametrize("kind", ["stall", "cut"])
def test_an_upstream_failing_mid_response_is_one_line_and_a_closed_connection(
    up: RecordingUpstream, transport: str, kind: str
) -> None:
    """Headers went out, then the upstream timed out (or hung up): no traceback, one line naming
    the upstream, and the client sees its response end short of its Content-Length."""
    gw = gateway(up, transport, readTimeout="300ms")
    lines = _Lines()
    watched = [logging.getLogger("uvicorn.error"), logging.getLogger("gateway.proxy")]
    for logger in watched:
        logger.addHandler(lines)
    try:
        with connect(gw) as s:
            s.sendall(b"GET /%b/100000 HTTP/1.1\r\nhost: gw\r\n\r\n" % kind.encode())
            head, body, complete = read_response(s)
        wait_until(lambda: all(c.closed for c in up.conn_of("/" + kind)))
    finally:
        for logger in watched:
            logger.removeHandler(lines)
        gw.stop()
    assert head.startswith(b"HTTP/1.1 200") and not complete and len(body) < 200_000
    messages = [r.getMessage() for r in lines.lines if r.levelno >= logging.WARNING]
    assert len(messages) == 1, messages
    assert "failed mid-response" in messages[0] and up.url in messages[0]
    assert all(r.exc_info is None for r in lines.lines)


def _sysctl_max(name: str) -> int:
    with open(f"/proc/sys/net/ipv4/{name}") as f:
        return int(f.read().split()[2])


@pytest.mark.parametrize("server", ["zttp", "httptools"])
def test_an_upload_to_an_upstream_that_reads_nothing_is_held_by_back_pressure(
    transport: str, server: str
) -> None:
    """The client can push only what the sockets on the way and the proxy's fixed buffers hold;
    without back-pressure it pushes the whole body into the gateway's memory. The client's send
    timeout only ends the test: a stalled client is the expected outcome, not a timing guess.
    Both HTTP implementations of the server must stop reading the client meanwhile."""
    small = 64 * 1024
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, small)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    gw = start_gateway({
        "upstreams": [{"url": f"http://127.0.0.1:{port}"}], "enablePriorityAndFairness": False,
        "proxy": {"transport": transport, "readTimeout": "30s"}, "httpImplementation": server,
    })  # fmt: skip
    # Everything the way to the upstream can hold: the gateway's two sockets (autotuned up to
    # the kernel maximum), the two small ones set here (the kernel doubles what is asked),
    # and the proxy's own bound (server buffer + one message + the transport's write buffer).
    bound = _sysctl_max("tcp_rmem") + _sysctl_max("tcp_wmem") + 4 * small + 1024 * 1024
    total = 3 * bound
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", gw.port)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, small)
            s.sendall(b"POST /upload HTTP/1.1\r\nhost: gw\r\ncontent-length: %d\r\n\r\n" % total)
            listener.settimeout(10)
            conn, _ = listener.accept()
            held.append(conn)  # accepted, never read
            # The request must stay alive meanwhile: once answered, the rest of its body would
            # be read and discarded by the server, and the count here would mean nothing.
            s.settimeout(2)
            chunk = b"u" * small
            with contextlib.suppress(TimeoutError):
                while sent < total:
                    sent += s.send(chunk)
    finally:
        for c in held:  # the upstream hangs up, which ends the request at once
            c.close()
        gw.stop()
        listener.close()
    assert sent < bound, f"client pushed {sent} bytes into a gateway whose upstream read none"


@pytest.mark.parametrize("transport", ["h1", "aiohttp", "httpx"])
def test_an_upstream_that_reads_none_of_the_body_times_out(transport: str) -> None:
    """Back-pressure must not turn into an endless wait: readTimeout also bounds how long the
    upstream may leave the request body unread (httpx-aiohttp has no such timeout)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    gw = start_gateway({
        "upstreams": [{"url": f"http://127.0.0.1:{port}"}], "enablePriorityAndFairness": False,
        "proxy": {"transport": transport, "readTimeout": "500ms"},
    })  # fmt: skip
    size = _sysctl_max("tcp_wmem") + 8 * 1024 * 1024  # more than the way to the upstream holds
    held: list[socket.socket] = []
    try:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as s:
            s.sendall(b"POST /upload HTTP/1.1\r\nhost: gw\r\ncontent-length: %d\r\n\r\n" % size)
            listener.settimeout(10)
            held.append(listener.accept()[0])  # never read
            sender = threading.Thread(target=_send_quietly, args=(s, size), daemon=True)
            sender.start()
            head, body, _ = read_response(s)
    finally:
        for c in held:
            c.close()
        gw.stop()
        listener.close()
    assert head.startswith(b"HTTP/1.1 504"), head
    assert b"read none of the request" in body or b"timed out" in body.lower(), body


def _send_quietly(s: socket.socket, size: int) -> None:
    chunk = b"u" * 65536
    with contextlib.suppress(OSError):
        for _ in range(size // len(chunk)):
            s.sendall(chunk)


def test_a_download_to_a_client_that_reads_nothing_is_held_by_back_pressure(
    transport: str,
) -> None:
    """The mirror image: the upstream can push only what the sockets and the proxy's fixed
    buffers hold while the client reads nothing."""
    small = 64 * 1024
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    pushed: list[int] = []
    conns: list[socket.socket] = []
    bound = _sysctl_max("tcp_rmem") + _sysctl_max("tcp_wmem") + 4 * small + 1024 * 1024
    total = 3 * bound

    def serve() -> None:
        conn, _ = listener.accept()
        conns.append(conn)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, small)
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        conn.settimeout(2)  # ends the test once the upstream is stalled
        sent = 0
        with contextlib.suppress(OSError):
            while sent < total:
                sent += conn.send(b"d" * small)
        pushed.append(sent)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    gw = start_gateway({
        "upstreams": [{"url": f"http://127.0.0.1:{port}"}], "enablePriorityAndFairness": False,
        "proxy": {"transport": transport, "readTimeout": "30s"},
    })  # fmt: skip
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, small)
            s.connect(("127.0.0.1", gw.port))
            s.sendall(b"GET /download HTTP/1.1\r\nhost: gw\r\n\r\n")
            server.join(60)
    finally:
        for c in conns:
            c.close()
        gw.stop()
        listener.close()
    assert pushed and pushed[0] < bound, f"upstream pushed {pushed} bytes to a client reading none"
