"""A client that goes away while its proxied request executes ends the request at once: the
upstream request is abandoned (the upstream sees its connection closed), the seats go back and
the access log records nginx's 499, over HTTP/1.1 and HTTP/2 (a stream reset or a lost
connection), while the upstream still holds the answer or does not take the request body.

The upstreams hold their answers until released (``/hold/{id}``), so nothing here sleeps: the
seats are read from ``/metrics`` until they drop, with a bound."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from h2.errors import ErrorCodes

from gateway.proxy.app import ProxyApp, UpstreamRoute
from gateway.proxy.transport import PoolLimits, Timeouts, create_transport
from tests.frontdoor.conftest import ServerThread, holding, start_gateway
from tests.frontdoor.h2_client import BOUND, H2Client
from tests.frontdoor.test_flowcontrol import metric
from tests.frontdoor.test_http2 import response
from tests.support.wait import wait_for, wait_until

CONFIG = str(Path(__file__).with_name("apf_config.yaml"))
SEATS = "apiserver_flowcontrol_current_executing_seats"
# /queue/* runs on a one-seat level.
LEVEL = {"priority_level": "tiny-queue", "flow_schema": "queue-fs"}


def start(upstream_url: str, tmp_path: Path) -> ServerThread:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admin-token,admin,1,"system:masters"\n')
    return start_gateway(
        {
            "upstreams": [{"url": upstream_url}],
            "authentication": {"tokenAuthFile": str(tokens)},
            "client": {"http2": {"priorKnowledge": True}},
            "accessLog": {"path": str(tmp_path / "access.log")},
        },
        [CONFIG],
    )


@pytest.fixture
def gw(upstream: ServerThread, gateways: list[ServerThread], tmp_path: Path) -> ServerThread:
    gateways.append(start(upstream.url, tmp_path))
    return gateways[-1]


def seats(gw: ServerThread) -> float:
    return metric(gw, SEATS, **LEVEL)


def executing(gw: ServerThread, upstream: ServerThread, key: str) -> None:
    wait_until(lambda: key in holding(upstream), what=f"request {key} upstream")
    assert seats(gw) == 1


def ended(gw: ServerThread, upstream: ServerThread, key: str) -> None:
    """The seat is back and the upstream saw its connection closed (the request ended there
    rather than being answered: ``Upstream.dropped``)."""
    wait_until(lambda: seats(gw) == 0, what=f"request {key}'s seat back", interval=0.05)
    wait_until(lambda: key in upstream.app.dropped, what=f"the upstream connection of {key} closed")


def logged(tmp_path: Path, path: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        log = tmp_path / "access.log"
        for line in log.read_text().splitlines() if log.exists() else ():
            doc = json.loads(line)
            if doc["path"] == path:
                return dict(doc)
        return None

    return wait_for(find, what=f"the access log line of {path}")


def test_an_http1_client_that_disconnects_ends_its_request(
    gw: ServerThread, upstream: ServerThread, tmp_path: Path
) -> None:
    with socket.create_connection(("127.0.0.1", gw.port), timeout=BOUND) as s:
        s.sendall(b"GET /queue/hold/h1 HTTP/1.1\r\nHost: x\r\n\r\n")
        executing(gw, upstream, "h1")
    ended(gw, upstream, "h1")
    line = logged(tmp_path, "/queue/hold/h1")
    assert (line["status"], line["bytesOut"], line["apf"]) == (499, 0, "executed")


def test_an_http2_stream_reset_ends_its_request_not_the_connection(
    gw: ServerThread, upstream: ServerThread, tmp_path: Path
) -> None:
    c = H2Client(gw.port)
    try:
        sid = c.request("/queue/hold/h2")
        executing(gw, upstream, "h2")
        c.conn.reset_stream(sid, ErrorCodes.CANCEL)
        c.flush()
        ended(gw, upstream, "h2")
        assert response(c, c.request("/queue/echo"))[0] == 200  # the connection goes on
    finally:
        c.close()
    assert logged(tmp_path, "/queue/hold/h2")["status"] == 499


def test_an_http2_connection_lost_ends_its_requests(
    gw: ServerThread, upstream: ServerThread
) -> None:
    c = H2Client(gw.port)
    c.request("/queue/hold/h2-lost")
    executing(gw, upstream, "h2-lost")
    c.close()
    ended(gw, upstream, "h2-lost")


class NotReading:
    """An upstream that accepts and reads nothing (a request body it does not take) until
    ``drain``, which reads to the end of the connection."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(BOUND)
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        try:
            self.conns.append(self.sock.accept()[0])
        except OSError:
            return

    def drain(self) -> int:
        """Bytes read until the gateway closed the connection (fails if it does not)."""
        conn = wait_for(lambda: self.conns[0] if self.conns else None, what="the connection")
        conn.settimeout(BOUND)
        total = 0
        while chunk := conn.recv(1 << 20):
            total += len(chunk)
        return total

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def not_reading() -> Iterator[NotReading]:
    up = NotReading()
    yield up
    up.close()


def test_a_stream_reset_while_its_body_is_stuck_upstream_ends_its_request(
    not_reading: NotReading, gateways: list[ServerThread], tmp_path: Path
) -> None:
    """The proxy is not reading the client then (it waits for the upstream to take the last
    chunk), so only the server's word of the reset can end the request. (Over HTTP/1.1 the
    gateway has stopped reading that client's socket too and cannot see it leave.)"""
    gw = start(not_reading.url, tmp_path)
    gateways.append(gw)
    length = 1 << 30
    c = H2Client(gw.port)
    head = [("content-length", str(length))]
    sid = c.request("/queue/upload", method="POST", end=False, extra=head)

    def stuck() -> bool:
        """The gateway holds body bytes the proxy does not take: it waits on the upstream."""
        assert gw.server is not None
        conns = gw.call(lambda: list(gw.server.server_state.connections))
        streams = [s for p in conns for s in getattr(p, "streams", {}).values()]
        return gw.call(lambda: any(s.unacked and not s.waiting for s in streams))

    def send_until_stuck() -> bool | None:
        window = c.conn.local_flow_control_window(sid)
        if window:
            c.conn.send_data(sid, bytes(min(window, c.conn.max_outbound_frame_size)))
            c.flush()
            return None
        return True if not c.read(0.2) and stuck() else None  # no WINDOW_UPDATE any more

    try:
        wait_for(send_until_stuck, what="the upload stuck upstream", interval=0)
        assert seats(gw) == 1
        c.conn.reset_stream(sid, ErrorCodes.CANCEL)
        c.flush()
        wait_until(lambda: seats(gw) == 0, what="the upload's seat back", interval=0.05)
    finally:
        c.close()
    assert 0 < not_reading.drain() < length  # closed mid-body, not completed
    assert logged(tmp_path, "/queue/upload")["status"] == 499


def test_under_another_server_the_proxy_watches_receive_for_the_disconnect(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    """Plain uvicorn gives no ``Departure``: the proxy reads ``http.disconnect`` itself."""

    def make(_: object) -> ProxyApp:
        transport = create_transport("h1", timeouts=Timeouts(), limits=PoolLimits())
        return ProxyApp(routes=[UpstreamRoute("/", upstream.url)], transport=transport)

    proxy = ServerThread(make).start()  # type: ignore[arg-type]
    gateways.append(proxy)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=BOUND) as s:
        s.sendall(b"GET /hold/plain HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: "plain" in holding(upstream), what="the request upstream")
    wait_until(lambda: "plain" in upstream.app.dropped, what="the upstream connection closed")
