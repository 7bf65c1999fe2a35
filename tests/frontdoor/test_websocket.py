"""WebSocket pass-through on real servers: the gateway (uvicorn, both HTTP implementations) in
front of a real aiohttp WebSocket upstream, spoken to with aiohttp's client."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from gateway.cli.main import build_parser
from gateway.cli.serve import overrides_from_args
from gateway.http.status import send_status
from gateway.http.websocket import http_send
from gateway.settings.sources import load_config
from gateway.testing import FakeEventClock
from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.frontdoor.ws_upstream import SUCCESS, WebSocketUpstream
from tests.support.wait import async_wait_until, wait_until

PF_FS = "X-Kubernetes-PF-FlowSchema-UID"


@pytest.fixture
def ws_upstream() -> Iterator[WebSocketUpstream]:
    up = WebSocketUpstream().start()
    yield up
    up.stop()


@pytest.fixture(params=["zttp", "httptools"])
def gateway(
    request: pytest.FixtureRequest, ws_upstream: WebSocketUpstream
) -> Iterator[ServerThread]:
    gw = start_gateway(
        {"upstreams": [{"url": ws_upstream.url}], "httpImplementation": request.param}
    )
    yield gw
    gw.stop()


def ws_url(gw: ServerThread, path: str) -> str:
    return f"ws://127.0.0.1:{gw.port}{path}"


def run(main: Callable[[aiohttp.ClientSession], Awaitable[None]]) -> None:
    async def outer() -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.wait_for(main(session), 20)

    asyncio.run(outer())


def test_echo_with_subprotocol_text_and_binary(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    async def main(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(
            ws_url(gateway, "/echo?x=1"), protocols=("chat.v3", "chat.v1"),
            headers={"X-Custom": "kept"},
        ) as ws:  # fmt: skip
            assert ws.protocol == "chat.v1"  # the upstream's choice, passed through
            assert PF_FS in ws._response.headers  # classified like any request
            await ws.send_str("héllo")
            msg = await ws.receive()
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.TEXT, "héllo")
            await ws.send_bytes(b"\x00\xffbin")
            msg = await ws.receive()
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.BINARY, b"\x00\xffbin")

    run(main)
    headers = ws_upstream.seen("headers")[0]
    assert headers["x-custom"] == "kept"
    assert headers["sec-websocket-protocol"] == "chat.v3,chat.v1"
    assert ws_upstream.seen("protocol") == ["chat.v1"]
    assert "x-forwarded-for" in headers and headers["x-remote-user"] == "system:anonymous"
    assert ws_upstream.seen("text") == ["héllo"]


def test_close_codes_and_reasons_both_ways(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    async def main(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(ws_url(gateway, "/echo")) as ws:
            await ws.close(code=4001, message=b"client done")
        async with session.ws_connect(ws_url(gateway, "/echo")) as ws:
            await ws.send_str("close:4002:upstream done")
            msg = await ws.receive()
            assert msg.type is aiohttp.WSMsgType.CLOSE
            assert (msg.data, msg.extra) == (4002, "upstream done")

    run(main)
    wait_until(lambda: len(ws_upstream.seen("closed")) == 2, what="both closes upstream")
    assert ws_upstream.seen("closed")[0] == (4001, "client done")


def test_pings_are_answered_on_each_side(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    async def main(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(ws_url(gateway, "/echo"), autoping=False) as ws:
            await ws.ping(b"from-client")
            msg = await ws.receive()
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.PONG, b"from-client")
            await ws.send_str("ping")  # the upstream pings the gateway
            await async_wait_until(
                lambda: ws_upstream.seen("pong") == [b"from-upstream"], what="the pong upstream"
            )

    run(main)


def test_kubectl_exec_v5_channel_framing(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    """What kubectl (client-go's websocket executor) does: offer v5 then v4, send stdin and a
    resize on their channels, close stdin with v5's close signal, read stdout/stderr and the
    Status on the error channel."""
    path = "/api/v1/namespaces/default/pods/web/exec?command=sh&stdin=true&stdout=true&tty=true"
    got: dict[int, bytes] = {}

    async def main(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(
            ws_url(gateway, path), protocols=("v5.channel.k8s.io", "v4.channel.k8s.io")
        ) as ws:
            assert ws.protocol == "v5.channel.k8s.io"
            assert PF_FS not in ws._response.headers  # exec is long-running: no APF
            await ws.send_bytes(b"\x04" + json.dumps({"Width": 80, "Height": 24}).encode())
            await ws.send_bytes(b"\x00echo hi\n")
            await ws.send_bytes(b"\xff\x00")  # v5: stdin closed
            async for msg in ws:
                assert msg.type is aiohttp.WSMsgType.BINARY
                got[msg.data[0]] = got.get(msg.data[0], b"") + msg.data[1:]
            assert ws.close_code == 1000

    run(main)
    assert got == {1: b"echo hi\n", 2: b"ECHO HI\n", 3: json.dumps(SUCCESS).encode()}
    assert ws_upstream.seen("resize") == [{"Width": 80, "Height": 24}]
    assert ws_upstream.seen("frame")[1:] == [b"\x00echo hi\n", b"\xff\x00"]
    assert ws_upstream.seen("query") == [path.partition("?")[2]]


def test_port_forward_channel_framing(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    path = "/api/v1/namespaces/default/pods/web/portforward?ports=8080"

    async def main(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(
            ws_url(gateway, path), protocols=("portforward.k8s.io",)
        ) as ws:
            assert ws.protocol == "portforward.k8s.io"
            for channel in (0, 1):  # each channel opens with its port, little-endian
                msg = await ws.receive()
                assert msg.data == bytes([channel]) + struct.pack("<H", 8080)
            await ws.send_bytes(b"\x00GET / HTTP/1.0\r\n\r\n")
            msg = await ws.receive()
            assert msg.data == b"\x00" + b"GET / HTTP/1.0\r\n\r\n"[::-1]

    run(main)


def test_max_message_size_both_directions(ws_upstream: WebSocketUpstream) -> None:
    gw = start_gateway(
        {"upstreams": [{"url": ws_upstream.url}], "proxy": {"websocket": {"maxMessageBytes": 4096}}}
    )
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            async with session.ws_connect(ws_url(gw, "/echo")) as ws:
                await ws.send_bytes(b"x" * 4096)  # at the limit: relayed
                assert (await ws.receive()).data == b"x" * 4096
                await ws.send_bytes(b"x" * 4097)
                msg = await ws.receive()
                assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1009)
            async with session.ws_connect(ws_url(gw, "/echo")) as ws:
                await ws.send_str("big:4097")  # from the upstream
                msg = await ws.receive()
                assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1009)

        run(main)
        wait_until(lambda: len(ws_upstream.seen("closed")) == 2, what="both closes upstream")
        assert [c for c, _ in ws_upstream.seen("closed")] == [1009, 1009]
        assert ws_upstream.seen("binary") == [4096]  # the oversized message never arrived
    finally:
        gw.stop()


def _fake_clock_gateway(upstream: WebSocketUpstream, **websocket: Any) -> ServerThread:
    return start_gateway(
        {"upstreams": [{"url": upstream.url}], "proxy": {"websocket": websocket}},
        clock=lambda loop: FakeEventClock(start=1000.0),
    )


def test_idle_timeout_closes_both_sides(ws_upstream: WebSocketUpstream) -> None:
    gw = _fake_clock_gateway(ws_upstream, idleTimeout="300s")
    clock: FakeEventClock = gw.app.clock
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            async with session.ws_connect(ws_url(gw, "/echo")) as ws:
                await ws.send_str("a")
                assert (await ws.receive()).data == "a"
                gw.call(lambda: clock.advance(299))  # a message resets the idle time
                await ws.send_str("b")
                assert (await ws.receive()).data == "b"
                gw.call(lambda: clock.advance(299))
                await ws.send_str("c")
                assert (await ws.receive()).data == "c"
                gw.call(lambda: clock.advance(301))
                msg = await ws.receive()
                assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1001)
                assert "idleTimeout" in msg.extra

        run(main)
        wait_until(lambda: ws_upstream.seen("closed"), what="the upstream's close")
        assert ws_upstream.seen("closed")[0][0] == 1001
    finally:
        gw.stop()


def test_client_that_never_reads_is_dropped(ws_upstream: WebSocketUpstream) -> None:
    """The upstream floods a client that reads nothing: the relay's send to the client waits
    (back-pressure, nothing buffered beyond one message), and once it has waited
    client.sendTimeout the relay ends and closes the upstream, saying why."""
    gw = _fake_clock_gateway(ws_upstream, idleTimeout="100000h")
    clock: FakeEventClock = gw.app.clock

    def closed_after_a_minute_more() -> bool:
        gw.call(lambda: clock.advance(61))  # client.sendTimeout is 60 s
        return bool(ws_upstream.seen("closed"))

    try:

        async def main(session: aiohttp.ClientSession) -> None:
            async with session.ws_connect(ws_url(gw, "/echo")) as ws:
                await ws.send_str("flood:400:65536")  # 25 MiB
                await async_wait_until(
                    lambda: ws_upstream.flooding, what="the upstream to start sending"
                )
                await async_wait_until(
                    closed_after_a_minute_more, what="the upstream's close", interval=0.05
                )

        run(main)
        code, reason = ws_upstream.seen("closed")[0]
        assert (code, reason) == (1001, "client not reading (client.sendTimeout)")
    finally:
        gw.stop()


def test_authentication_before_accept(tmp_path: Path, ws_upstream: WebSocketUpstream) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('secret-token-123,alice,1,"dev"\n')
    gw = start_gateway(
        {"upstreams": [{"url": ws_upstream.url}],
         "authentication": {"tokenAuthFile": str(tokens), "anonymous": False}}
    )  # fmt: skip
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(gw, "/echo"))
            assert refused.value.status == 401  # an HTTP answer, not a bare 403
            auth = {"Authorization": "Bearer secret-token-123"}
            async with session.ws_connect(ws_url(gw, "/echo"), headers=auth) as ws:
                await ws.send_str("hi")
                assert (await ws.receive()).data == "hi"
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(gw, "/refuse"), headers=auth)
            assert refused.value.status == 403  # the upstream's refusal

        run(main)
        headers = ws_upstream.seen("headers")
        assert len(headers) == 1 and headers[0]["x-remote-user"] == "alice"
        assert "authorization" in headers[0]  # the client's own, passed on as for HTTP
    finally:
        gw.stop()


def test_upstream_down_is_502(ws_upstream: WebSocketUpstream) -> None:
    gw = start_gateway({"upstreams": [{"url": "http://127.0.0.1:1"}]})
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(gw, "/echo"))
            assert refused.value.status == 502

        run(main)
    finally:
        gw.stop()


@pytest.mark.parametrize("implementation", ["zttp", "httptools"])
def test_other_upgrades_are_refused(implementation: str, upstream: ServerThread) -> None:
    """``Upgrade: h2c`` is not switched to: the request is answered as HTTP/1.1 and the
    upstream never sees the upgrade."""
    gw = start_gateway({"upstreams": [{"url": upstream.url}], "httpImplementation": implementation})
    try:
        r = httpx.get(
            gw.url + "/echo",
            headers={"Upgrade": "h2c", "Connection": "Upgrade, HTTP2-Settings",
                     "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA"},
        )  # fmt: skip
        assert r.status_code == 200 and r.http_version == "HTTP/1.1"
        sent = {k.lower() for k, _ in r.json()["headers"]}
        assert not sent & {"upgrade", "http2-settings"}
    finally:
        gw.stop()


def test_refusal_without_the_http_response_extension_is_a_close_code() -> None:
    """A server without ``websocket.http.response``: the refusal becomes a close code."""
    sent: list[dict[str, Any]] = []

    async def record(message: Any) -> None:
        sent.append(dict(message))

    async def refuse(status: int) -> None:
        send = http_send({"type": "websocket", "extensions": {}}, record)
        await send_status(send, status, "no")

    for status, code in ((401, 1008), (429, 1013), (502, 1014), (504, 1011)):
        sent.clear()
        asyncio.run(refuse(status))
        assert sent == [{"type": "websocket.close", "code": code}]


def test_serve_flags_set_the_websocket_settings() -> None:
    args = build_parser().parse_args(
        ["serve", "--websocket-max-message-bytes", "4096", "--websocket-idle-timeout", "90s"]
    )
    ws = load_config([], overrides_from_args(args)).settings.proxy.websocket
    assert (ws.max_message_bytes, ws.idle_timeout) == (4096, 90.0)


APF_CONFIG = str(Path(__file__).with_name("apf_config.yaml"))


def test_seats_held_for_the_handshake_only_and_429_before_accept(
    ws_upstream: WebSocketUpstream,
) -> None:
    """tiny-reject has one seat: a handshake the upstream has not answered holds it, so a
    second handshake gets kube's 429 as an HTTP answer; once accepted, the seat is free."""
    gw = start_gateway({"upstreams": [{"url": ws_upstream.url}]}, paths=[APF_CONFIG])
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            first = asyncio.ensure_future(session.ws_connect(ws_url(gw, "/reject/slow")))
            await async_wait_until(
                lambda: ws_upstream.seen("slow"), what="the first handshake at the upstream"
            )
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(gw, "/reject/echo"))
            assert refused.value.status == 429
            assert refused.value.headers is not None
            assert int(refused.value.headers["Retry-After"]) >= 1
            assert PF_FS in refused.value.headers
            ws_upstream.answer_slow()
            async with await first as ws1, session.ws_connect(ws_url(gw, "/reject/echo")) as ws2:
                await ws1.send_str("one")
                await ws2.send_str("two")  # both open: the seat went back at accept
                assert [(await ws1.receive()).data, (await ws2.receive()).data] == ["one", "two"]

        run(main)
    finally:
        gw.stop()


def test_apf_off_authenticates_and_counts_the_handshake(
    tmp_path: Path, ws_upstream: WebSocketUpstream
) -> None:
    """With APF off the max-in-flight filter describes websockets too: refused without
    credentials (before, it let them through undescribed), relayed with the identity."""
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('secret-token-123,alice,1,"dev"\n')
    gw = start_gateway(
        {"upstreams": [{"url": ws_upstream.url}], "enablePriorityAndFairness": False,
         "authentication": {"tokenAuthFile": str(tokens), "anonymous": False}}
    )  # fmt: skip
    limiter = gw.app.admission
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(gw, "/echo"))
            assert refused.value.status == 401
            auth = {"Authorization": "Bearer secret-token-123"}
            async with session.ws_connect(ws_url(gw, "/echo"), headers=auth) as ws:
                await ws.send_str("hi")
                assert (await ws.receive()).data == "hi"
                # counted for the handshake only
                assert gw.call(lambda: limiter.inflight["readOnly"].current) == 0

        run(main)
        assert ws_upstream.seen("headers")[0]["x-remote-user"] == "alice"
    finally:
        gw.stop()


def test_wss_upstream_certificate_is_verified(tmp_path: Path) -> None:
    """An https:// route is relayed as wss:// with the route's upstreams[].tls settings, the
    system trust store by default: a self-signed upstream certificate is refused (502), never
    trusted silently; the route that names it as its caFile relays."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    up = WebSocketUpstream(ssl_context=context).start()
    gw = start_gateway({"upstreams": [{"url": up.url}]})
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            # The upstream itself speaks wss:// to a client that trusts its certificate.
            trusting = ssl.create_default_context(cafile=str(cert))
            direct = up.url.replace("https", "wss") + "/echo"
            async with session.ws_connect(direct, ssl=trusting) as ws:
                await ws.send_str("direct")
                assert (await ws.receive()).data == "direct"
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(ws_url(gw, "/echo"))
            assert refused.value.status == 502

        run(main)
        assert len(up.seen("headers")) == 1  # only the direct one reached the upstream
        trusting_gw = start_gateway({"upstreams": [{"url": up.url, "tls": {"caFile": str(cert)}}]})
        try:

            async def relayed(session: aiohttp.ClientSession) -> None:
                async with session.ws_connect(ws_url(trusting_gw, "/echo")) as ws:
                    await ws.send_str("through")
                    assert (await ws.receive()).data == "through"

            run(relayed)
        finally:
            trusting_gw.stop()
        assert len(up.seen("headers")) == 2
    finally:
        gw.stop()
        up.stop()


HANDSHAKE = {
    "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}  # fmt: skip


def test_refused_handshakes_carry_their_bodies(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    """The upstream's refusal is relayed with its body (kubectl prints a Status's message);
    the gateway's own refusals carry theirs."""
    r = httpx.get(gateway.url + "/refuse", headers=HANDSHAKE)
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403}
    r = httpx.get(gateway.url + "/echo", headers={**HANDSHAKE, "Impersonate-User": "admin"})
    assert r.status_code == 403
    assert r.json()["kind"] == "Status" and "impersonation" in r.json()["message"]


def _masked_text(text: str) -> bytes:
    """One client frame (RFC 6455 5.2): FIN + text, masked, payload under 126 bytes."""
    payload = text.encode()
    key = b"\x01\x02\x03\x04"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + key + masked


def test_connection_of_a_client_that_never_reads_is_aborted(
    ws_upstream: WebSocketUpstream,
) -> None:
    """A client with a small receive window asks for a flood and reads nothing. Writing to it
    pauses; after client.sendTimeout (0.3 s here: the timeout is the behaviour) the
    connection is aborted, not left closing forever with its unsent bytes, and the upstream
    is closed."""
    gw = start_gateway({"upstreams": [{"url": ws_upstream.url}], "client": {"sendTimeout": 0.3}})
    assert gw.server is not None
    server = gw.server

    def open_connections() -> int:
        return int(gw.call(lambda: len(server.server_state.connections)))

    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", gw.port))
        with sock:
            head = "".join(f"{k}: {v}\r\n" for k, v in HANDSHAKE.items())
            sock.sendall(f"GET /echo HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(1)  # byte by byte: nothing of the frames is read
            assert answer.startswith(b"HTTP/1.1 101")
            sock.sendall(_masked_text("flood:400:65536"))
            wait_until(lambda: ws_upstream.flooding, what="the upstream to start sending")
            wait_until(lambda: open_connections() == 0, timeout=10, what="the abort")
        wait_until(lambda: ws_upstream.seen("closed"), timeout=20, what="the upstream's close")
        assert ws_upstream.seen("closed")[0][0] == 1001
        assert gw.call(lambda: gw.app.client_limits.closed["send_timeout"]) == 1
    finally:
        gw.stop()


def test_shutdown_closes_both_sides_with_1012(ws_upstream: WebSocketUpstream) -> None:
    gw = start_gateway({"upstreams": [{"url": ws_upstream.url}]})
    try:

        async def main(session: aiohttp.ClientSession) -> None:
            async with session.ws_connect(ws_url(gw, "/echo")) as ws:
                await ws.send_str("hi")
                assert (await ws.receive()).data == "hi"
                await asyncio.get_running_loop().run_in_executor(None, gw.stop)
                msg = await ws.receive()
                assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1012)  # restarting

        run(main)
        wait_until(lambda: ws_upstream.seen("closed"), what="the upstream's close")
        assert ws_upstream.seen("closed")[0][0] == 1012
    finally:
        gw.stop()


def test_upstream_dropped_without_close_is_1014(
    gateway: ServerThread, ws_upstream: WebSocketUpstream
) -> None:
    async def main(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(ws_url(gateway, "/echo")) as ws:
            await ws.send_str("drop")
            msg = await ws.receive()
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1014)  # bad gateway
            assert msg.extra == "upstream connection lost"

    run(main)
