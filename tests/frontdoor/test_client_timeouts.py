"""Client timeouts and connection limits (``client.*``), over raw sockets against a real
``serve`` stack (uvloop, as ``apf-gateway serve`` runs) on both HTTP/1.1 implementations.

The timeouts are made small (0.3 s); every outcome is polled for with a bound of seconds, and
"not before the timeout" is checked against the time the test sent its first byte.
"""

from __future__ import annotations

import contextlib
import json
import resource
import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.server import Gateway
from gateway.serving.limits import file_limit_warning
from gateway.settings.sources import ConfigLoadError, load_config
from tests.frontdoor.conftest import ServerThread, holding
from tests.support.wait import wait_until

TIMEOUT = 0.3
BOUND = 5.0  # generous upper bound for anything the gateway must do after a timeout
HEADER = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"
PARTIAL_HEAD = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: "


class UvloopServer(ServerThread):
    def __init__(self, overrides: dict[str, Any], paths: list[str] | None = None) -> None:
        loaded = load_config(paths or [], overrides)
        super().__init__(lambda loop: Gateway(loaded, loop=loop))
        self.loop.close()
        self.loop = uvloop.new_event_loop()


def start(
    upstream: ServerThread, impl: str, paths: list[str] | None = None, **client: Any
) -> ServerThread:
    limits = {
        "headerTimeout": TIMEOUT,
        "bodyTimeout": TIMEOUT,
        "sendTimeout": TIMEOUT,
        "keepAliveTimeout": TIMEOUT,
        "maxHeaderBytes": 4096,
        "maxConnections": 50,
        **client,
    }
    overrides = {
        "upstreams": [{"url": upstream.url}],
        "httpImplementation": impl,
        "shutdownGracePeriod": 1,  # a request left waiting does not hold up teardown
    }
    return UvloopServer({**overrides, "client": limits}, paths).start()


@pytest.fixture(params=["zttp", "httptools"])
def impl(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gateway(impl: str, upstream: ServerThread, gateways: list[ServerThread]) -> ServerThread:
    gateways.append(start(upstream, impl))
    return gateways[-1]


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def read_until_closed(sock: socket.socket, within: float = BOUND) -> bytes:
    """Everything the server sends until it closes; failing if it is still open ``within``."""
    deadline = time.monotonic() + within
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"connection still open after {within}s; got {data!r}")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        except TimeoutError:
            continue
        if not chunk:
            return data
        data += chunk


def status_of(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"\r\nconnection: close\r\n" in head.lower() + b"\r\n"
    return int(head.split(b" ")[1]), json.loads(body)


def closed(gw: ServerThread, reason: str) -> int:
    """``gateway_client_connections_closed_total{reason}`` as /metrics exports it."""
    key = f'gateway_client_connections_closed_total{{reason="{reason}"}} '
    text = httpx.get(gw.url + "/metrics", timeout=BOUND).text
    return int(float(next(line for line in text.splitlines() if line.startswith(key))[len(key) :]))


def get(gw: ServerThread, path: str = "/echo") -> int:
    return httpx.get(gw.url + path, timeout=BOUND).status_code


def test_slowloris_heads_get_408_and_close_while_others_are_served(
    impl: str, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    # 300 connections (the cap is 320) each trickle a header that never ends. Bytes arriving
    # do not extend the head deadline; meanwhile a normal client is answered.
    gateway = start(upstream, impl, maxConnections=320)
    gateways.append(gateway)
    started = time.monotonic()  # before connecting: each head's deadline runs from its accept
    socks = [connect(gateway.port) for _ in range(300)]
    try:
        for s in socks:
            s.sendall(PARTIAL_HEAD)
        replies: dict[socket.socket, bytes] = {s: b"" for s in socks}
        closed_at: dict[socket.socket, float] = {}
        assert get(gateway) == 200
        while len(closed_at) < len(socks):
            assert time.monotonic() < started + BOUND, (
                f"{len(socks) - len(closed_at)} slow heads still open"
            )
            for s in socks:  # trickle, but only well before the deadline (checked per send:
                # on a loaded machine a pass over 300 sockets can take longer than the timeout)
                if time.monotonic() >= started + TIMEOUT / 2:
                    break
                s.send(b"a")
            readable, _, _ = select.select([s for s in socks if s not in closed_at], [], [], 0.02)
            for s in readable:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                replies[s] += chunk
                if not chunk:
                    closed_at[s] = time.monotonic()
        for s in socks:
            assert closed_at[s] - started >= TIMEOUT - 0.05
            code, status = status_of(replies[s])
            assert (code, status["kind"], status["code"]) == (408, "Status", 408)
            assert "client.headerTimeout" in status["message"]
    finally:
        for s in socks:
            s.close()
    assert get(gateway) == 200
    assert closed(gateway, "header_timeout") == 300


def test_silent_connection_is_closed_without_a_reply(gateway: ServerThread) -> None:
    with connect(gateway.port) as s:
        started = time.monotonic()
        assert read_until_closed(s) == b""
        assert time.monotonic() - started >= TIMEOUT - 0.05


def test_idle_keep_alive_connection_is_closed_without_a_reply(gateway: ServerThread) -> None:
    with connect(gateway.port) as s:
        s.sendall(b"GET /release/k HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = s.recv(65536)
        answered = time.monotonic()
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"ok")
        # Well under uvicorn's own default of 5 s, so this is the setting at work.
        assert read_until_closed(s, within=3.0) == b""
        assert time.monotonic() - answered >= TIMEOUT - 0.05


def test_half_sent_body_gets_408_and_close(gateway: ServerThread) -> None:
    with connect(gateway.port) as s:
        # (/echo: the upstream answers without reading a body, so nothing waits on it after.)
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
        started = time.monotonic()
        code, status = status_of(read_until_closed(s))
        assert time.monotonic() - started >= TIMEOUT - 0.05
    assert code == 408 and "client.bodyTimeout" in status["message"]
    assert closed(gateway, "body_timeout") == 1


def test_truncated_body_is_not_forwarded(gateway: ServerThread) -> None:
    with connect(gateway.port) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
        assert read_until_closed(s).startswith(b"HTTP/1.1 408 ")
    assert httpx.get(gateway.url + "/echo", timeout=2 * TIMEOUT + 1).status_code == 200


def test_half_sent_chunked_body_is_closed(gateway: ServerThread) -> None:
    with connect(gateway.port) as s:
        s.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
        )
        reply = read_until_closed(s)
    # The proxy streams the body, so the upstream's answer may have started (then the
    # connection is just closed); if not, 408.
    assert reply.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 408 "))
    assert not reply.endswith(b"\r\n0\r\n\r\n")  # never a complete chunked answer


def test_paused_body_of_a_queued_request_is_not_timed_out(
    impl: str, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    # While APF queues a request the gateway buffers 1 MiB of its body, then stops reading;
    # the client, blocked by that, is not silent by its own choice and is not timed out.
    gw = start(upstream, impl, [str(Path(__file__).with_name("apf_config.yaml"))])
    gateways.append(gw)
    level = gw.app.controller.levels["tiny-queue"].qs
    size = 3 << 20
    head = f"POST /queue/upload HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(httpx.get, gw.url + "/queue/hold/a", timeout=BOUND)
        wait_until(lambda: "a" in holding(upstream))
        # Connected only now, head sent at once: an idle connection is closed after
        # headerTimeout, which a slow machine can spend waiting for the first request.
        with connect(gw.port) as s:
            s.sendall(head.encode())
            sent = pool.submit(s.sendall, b"y" * size)
            wait_until(lambda: gw.call(lambda: level.tot_requests_waiting) == 1)

            def paused() -> bool:
                assert gw.server is not None
                conns = gw.call(lambda: list(gw.server.server_state.connections))
                return any(c.flow.read_paused for c in conns)

            wait_until(paused)
            s.settimeout(3 * TIMEOUT)  # what must NOT happen in this time is the assertion
            with pytest.raises(TimeoutError):
                s.recv(65536)
            assert httpx.get(upstream.url + "/release/a").status_code == 200
            assert running.result().status_code == 200
            sent.result()
            s.settimeout(BOUND)
            reply = s.recv(65536)
            while not reply.endswith(b"}"):
                reply += s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["bytes"] == size


def test_steady_slow_body_is_not_cut(
    impl: str, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    # The body timeout is the longest silence, not the time for the whole body: a body sent
    # in 15 pieces 0.1 s apart takes longer than bodyTimeout=1s and is still read.
    gateways.append(start(upstream, impl, bodyTimeout=1.0))
    with connect(gateways[-1].port) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n")
        for _ in range(15):
            time.sleep(0.1)  # the client's pace under test, not a wait for the server
            s.sendall(b"x")
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["bytes"] == 15


async def big_response(scope: Any, receive: Any, send: Any) -> None:
    """32 MiB, far more than the kernel's socket buffers take (a few MiB on loopback)."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    chunk = b"z" * 65536
    for _ in range(512):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def test_client_that_does_not_read_the_response_is_cut_off(
    impl: str, gateways: list[ServerThread]
) -> None:
    # A small receive window and no reads: the gateway's writes pause and stay paused. After
    # sendTimeout the connection is aborted (a close would wait for the unsent bytes).
    gateways.append(ServerThread(lambda loop: big_response).start())
    gw = start(gateways[-1], impl)
    gateways.append(gw)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gw.port))
    with sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")

        def open_connections() -> int:
            assert gw.server is not None
            return int(gw.call(lambda: len(gw.server.server_state.connections)))

        wait_until(lambda: open_connections() == 1)
        wait_until(lambda: open_connections() == 0, timeout=BOUND)
        # What the kernel already held still arrives; the rest never does.
        received = 0
        sock.settimeout(BOUND)
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
        assert received < 32 << 20
    assert closed(gw, "send_timeout") == 1


def test_requests_pipelined_behind_a_busy_one_pause_reading(
    gateway: ServerThread, upstream: ServerThread
) -> None:
    # More than maxHeaderBytes (4096) of requests queued behind one the upstream holds: the
    # gateway stops reading instead of buffering them, and answers them all afterwards.
    # (uvicorn's httptools protocol pauses on its own; zttp would buffer up to ~9 MB.)
    follow = b"GET /release/none HTTP/1.1\r\nHost: x\r\n\r\n" * 200
    with connect(gateway.port) as s:
        s.sendall(b"GET /hold/p HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: "p" in holding(upstream))
        s.sendall(follow)

        def paused() -> bool:
            assert gateway.server is not None
            conns = gateway.call(lambda: list(gateway.server.server_state.connections))
            return any(c.flow.read_paused for c in conns)

        wait_until(paused)
        assert httpx.get(upstream.url + "/release/p").status_code == 200
        data = b""
        while data.count(b"HTTP/1.1 200 ") < 201:
            chunk = s.recv(65536)
            assert chunk, f"closed after {data.count(b'HTTP/1.1 200 ')} replies"
            data += chunk
    assert b"released p" in data


def test_head_over_max_header_bytes_gets_431(gateway: ServerThread) -> None:
    big = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n"
    with connect(gateway.port) as s:
        s.sendall(big)
        code, status = status_of(read_until_closed(s))
    assert code == 431 and "client.maxHeaderBytes" in status["message"]
    # The same head in pieces, each read under the limit.
    with connect(gateway.port) as s:
        for i in range(0, len(big), 1000):
            s.sendall(big[i : i + 1000])
            time.sleep(0.01)  # separate reads on the server
        code, _ = status_of(read_until_closed(s))
    assert code == 431
    assert closed(gateway, "head_too_large") == 2


def test_head_under_the_limit_with_a_large_body_in_one_read_is_served(
    gateway: ServerThread,
) -> None:
    body = b"y" * 200_000
    with connect(gateway.port) as s:
        s.sendall(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nX-Pad: "
            + b"p" * 3000
            + b"\r\nContent-Length: 200000\r\n\r\n"
            + body
        )
        reply = b""
        while not reply.endswith(b"}"):
            chunk = s.recv(65536)
            assert chunk, reply
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["bytes"] == 200_000


def test_connections_over_the_cap_get_503_and_existing_ones_are_served(
    impl: str, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = start(upstream, impl, maxConnections=10, headerTimeout=2.0, keepAliveTimeout=30)
    gateways.append(gw)
    with connect(gw.port) as kept:
        kept.sendall(b"GET /release/a HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
        slow = [connect(gw.port) for _ in range(9)]
        for s in slow:
            s.sendall(PARTIAL_HEAD)
        # At the cap: a new connection is answered 503 and closed, without reading a request.
        with connect(gw.port) as extra:
            code, status = status_of(read_until_closed(extra))
        assert code == 503 and "client.maxConnections" in status["message"]
        # The connection already open is still served.
        kept.sendall(b"GET /release/b HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
        # Once the slow heads time out, new connections are served again.
        for s in slow:
            assert read_until_closed(s).startswith(b"HTTP/1.1 408 ")
            s.close()
        assert get(gw) == 200
        assert closed(gw, "over_capacity") == 1


def test_client_settings_are_validated_with_their_path(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(
        HEADER + "client: {headerTimeout: 0, maxHeaderBytes: 10, maxConnections: 0, "
        "keepAliveTimeout: '90s', bodyTimeout: -1}\n"
    )
    with pytest.raises(ConfigLoadError) as exc:
        load_config([f])
    text = "\n".join(exc.value.errors)
    for field in ("headerTimeout", "bodyTimeout", "maxHeaderBytes", "maxConnections"):
        assert f"document 1: client.{field}:" in text
    assert "keepAliveTimeout" not in text


def test_defaults_and_flags() -> None:

    c = load_config([], {}).settings.client
    assert (c.header_timeout, c.body_timeout, c.keep_alive_timeout) == (32.0, 60.0, 90.0)
    assert (c.max_header_bytes, c.max_connections) == (65536, 4096)
    args = build_parser().parse_args(
        ["serve", "--client-header-timeout", "5s", "--max-connections", "7"]
    )
    c = load_config([], overrides_from_args(args)).settings.client
    assert (c.header_timeout, c.max_connections) == (5.0, 7)


def test_reload_applies_to_new_connections(
    impl: str, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    gw = start(upstream, impl, headerTimeout=30, keepAliveTimeout=30)
    gateways.append(gw)
    with connect(gw.port) as before:
        # A first exchange, so the server has surely taken this connection before the reload.
        before.sendall(b"GET /release/q HTTP/1.1\r\nHost: x\r\n\r\n")
        assert before.recv(65536).startswith(b"HTTP/1.1 200 ")
        reloaded = load_config(
            [], {"upstreams": [{"url": upstream.url}], "client": {"headerTimeout": TIMEOUT}}
        )
        gw.call(lambda: gw.app.apply(reloaded))
        with connect(gw.port) as after:
            after.sendall(PARTIAL_HEAD)
            assert read_until_closed(after).startswith(b"HTTP/1.1 408 ")
        # The connection opened before the reload keeps its limits: a slow head is not cut
        # at the new 0.3 s.
        before.sendall(PARTIAL_HEAD)
        time.sleep(2 * TIMEOUT)  # what must NOT happen in this time is the assertion
        before.sendall(b"1\r\n\r\n")
        assert before.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_file_limit_warning() -> None:
    s = load_config([], {"client": {"maxConnections": 1000}}).settings
    # 1000 clients + 600 upstream (400 + 200 in flight) + spare
    assert file_limit_warning(s, 1024) is not None
    assert "ulimit -n 1664" in (file_limit_warning(s, 1024) or "")
    assert file_limit_warning(s, 1664) is None
    assert file_limit_warning(s, resource.RLIM_INFINITY) is None
