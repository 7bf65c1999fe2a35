"""Both HTTP/1.1 implementations the gateway can run on (zttp, the default, and httptools),
spoken to over raw sockets so that framing, not a client library's view of it, is checked."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.settings.sources import ConfigLoadError, load_config
from tests.frontdoor.conftest import ServerThread, start_gateway

HEADER = "apiVersion: gateway.apf.dev/v1alpha1\nkind: GatewayConfiguration\n"
PF = b"x-kubernetes-pf-flowschema-uid"
PROTOCOL_CLASS = {"zttp": "ZttpProtocol", "httptools": "HttpToolsProtocol"}


@pytest.fixture(params=["zttp", "httptools"])
def gateway(request: pytest.FixtureRequest, upstream: ServerThread) -> Iterator[ServerThread]:
    gw = start_gateway({"upstreams": [{"url": upstream.url}], "httpImplementation": request.param})
    yield gw
    gw.stop()


Reply = tuple[bytes, dict[bytes, bytes], bytes]


def _recv_until(sock: socket.socket, done: Callable[[bytes], bool], data: bytes = b"") -> bytes:
    """Read until ``done(data)``; the server closing the connection first fails the test."""
    while not done(data):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


def _exchange(port: int, raw: bytes, responses: int = 1) -> list[Reply]:
    """Send ``raw`` on one connection and read ``responses`` content-length-framed replies."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        buf = b""
        for _ in range(responses):
            buf = _recv_until(sock, lambda b: b"\r\n\r\n" in b, buf)
            head, buf = buf.split(b"\r\n\r\n", 1)
            status, *lines = head.split(b"\r\n")
            headers = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines)}
            size = int(headers.get(b"content-length", b"0"))
            buf = _recv_until(sock, lambda b, n=size: len(b) >= n, buf)
            out.append((status, headers, buf[:size]))
            buf = buf[size:]
    return out


def test_default_is_zttp() -> None:
    assert load_config([], {}).settings.http_implementation == "zttp"


def test_unknown_implementation_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "gw.yaml"
    f.write_text(HEADER + "httpImplementation: h2o\n")
    with pytest.raises(ConfigLoadError) as exc:
        load_config([f])
    assert any("document 1: httpImplementation:" in e and "h2o" in e for e in exc.value.errors)


def test_server_runs_the_chosen_implementation(gateway: ServerThread) -> None:
    assert gateway.server is not None
    impl = gateway.app.settings.http_implementation
    # uvicorn's class, with the client timeouts and limits of gateway.serving mixed in.
    bases = [c.__name__ for c in gateway.server.config.http_protocol_class.__mro__]
    assert PROTOCOL_CLASS[impl] in bases and "ClientGuard" in bases


def test_pipelined_keep_alive_requests_each_get_pf_headers(gateway: ServerThread) -> None:
    raw = b"".join(
        f"GET /api/v1/namespaces/ns{i}/pods HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(3)
    )
    replies = _exchange(gateway.port, raw, responses=3)
    assert [r[0] for r in replies] == [b"HTTP/1.1 200 OK"] * 3
    assert [json.loads(r[2])["path"] for r in replies] == [
        f"/api/v1/namespaces/ns{i}/pods" for i in range(3)
    ]
    assert all(len(r[1][PF]) == 36 for r in replies)


def test_head_has_length_and_no_body(gateway: ServerThread) -> None:
    # A HEAD reply with a body would shift the next reply on the connection; the GET after it
    # must parse as a response of its own.
    raw = b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /release/z HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(raw)
        data = _recv_until(sock, lambda d: d.count(b"\r\n\r\n") >= 2 and d.endswith(b"ok"))
    head_reply, get_reply = data.split(b"HTTP/1.1 200 OK", 2)[1:]
    assert b"content-length:" in head_reply.lower() and head_reply.endswith(b"\r\n\r\n")
    assert get_reply.endswith(b"\r\n\r\nok")


def test_expect_100_continue_upload(gateway: ServerThread) -> None:
    body = b"x" * 1000
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(body)
        data = _recv_until(sock, lambda d: d.endswith(b"}"))
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["bytes"] == 1000


def test_chunked_response_streams_through(gateway: ServerThread, upstream: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(b"GET /stream/2 HTTP/1.1\r\nHost: x\r\n\r\n")
        # Both chunks arrive before the upstream finishes.
        data = _recv_until(sock, lambda d: b"chunk1" in d)
        assert b"transfer-encoding: chunked" in data.lower()
        with socket.create_connection(("127.0.0.1", upstream.port), timeout=5) as up:
            up.sendall(b"GET /release/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while up.recv(65536):
                pass
        data = _recv_until(sock, lambda d: d.endswith(b"0\r\n\r\n"), data)
    assert b"end\n" in data


def test_conflicting_length_and_chunked_request_is_refused(gateway: ServerThread) -> None:
    # Content-Length beside Transfer-Encoding is the classic smuggling shape; neither parser
    # may forward it.
    raw = (
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400 ")
