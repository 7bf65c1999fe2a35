"""The reverse proxy in front of a real upstream: headers, streaming, upstream failures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.http.status import status_body
from gateway.server import Gateway
from gateway.settings.sources import load_config
from tests.frontdoor.conftest import ServerThread, holding, start_gateway
from tests.support.ports import free_port
from tests.support.wait import wait_until

APF_OFF = {"enablePriorityAndFairness": False}


@pytest.fixture(params=["h1", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _gateway(
    gateways: list[ServerThread], upstream: ServerThread, transport: str, **extra: Any
) -> str:
    proxy = {"transport": transport, **extra.pop("proxy", {})}
    gw = start_gateway({"upstreams": [{"url": upstream.url}], **APF_OFF, "proxy": proxy, **extra})
    gateways.append(gw)
    return gw.url


def test_headers_forwarded_and_hop_by_hop_stripped(
    upstream: ServerThread, gateways: list[ServerThread], transport: str
) -> None:
    url = _gateway(gateways, upstream, transport)
    r = httpx.get(
        url + "/echo/x?a=1",
        headers={
            "Connection": "keep-alive, X-Secret-Hop",
            "X-Secret-Hop": "1",
            "TE": "trailers",
            "X-Forwarded-For": "203.0.113.9",
            "X-Remote-User": "mallory",
            "X-Remote-Group": "system:masters",
            "X-Remote-Extra-Scopes": "all",
            "X-Custom": "kept",
        },
    )
    assert r.status_code == 200
    doc = r.json()
    headers: dict[str, list[str]] = {}
    for k, v in doc["headers"]:
        headers.setdefault(k, []).append(v)
    assert doc["path"] == "/echo/x" and doc["query"] == "a=1"
    assert "x-secret-hop" not in headers and "te" not in headers
    assert headers["x-custom"] == ["kept"]
    assert headers["x-forwarded-for"] == ["203.0.113.9, 127.0.0.1"]
    assert headers["x-forwarded-proto"] == ["http"]
    assert headers["x-forwarded-host"][0].startswith("127.0.0.1:")
    # Spoofed identity from an untrusted client is replaced by the authenticated one.
    assert headers["x-remote-user"] == ["system:anonymous"]
    assert headers["x-remote-group"] == ["system:unauthenticated"]
    assert "x-remote-extra-scopes" not in headers


def test_routes_by_longest_prefix(upstream: ServerThread, gateways: list[ServerThread]) -> None:
    other = ServerThread(lambda loop: _Fixed(b"other")).start()
    gateways.append(other)
    gw = start_gateway({
        "upstreams": [{"url": upstream.url}, {"url": other.url, "prefix": "/v2/"}], **APF_OFF,
    })  # fmt: skip
    gateways.append(gw)
    assert httpx.get(gw.url + "/v2/anything").text == "other"
    assert httpx.get(gw.url + "/echo").json()["path"] == "/echo"


def test_request_body_streams_to_upstream(
    upstream: ServerThread, gateways: list[ServerThread], transport: str
) -> None:
    url = _gateway(gateways, upstream, transport)

    def body():  # type: ignore[no-untyped-def]
        for _ in range(64):
            yield b"x" * 65536

    r = httpx.post(url + "/upload", content=body())
    assert r.status_code == 200
    doc = r.json()
    assert doc["bytes"] == 64 * 65536
    assert doc["chunks"] > 1  # arrived in pieces, not as one buffered body


def test_response_streams_before_upstream_finishes(
    upstream: ServerThread, gateways: list[ServerThread], transport: str
) -> None:
    url = _gateway(gateways, upstream, transport)
    with httpx.stream("GET", url + "/stream/3", timeout=5) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(3)]
        assert got == ["chunk0", "chunk1", "chunk2"]  # while the upstream still holds the rest
        httpx.get(upstream.url + "/release/stream")
        assert list(lines) == ["end"]


def test_refused_upstream_is_502_status(gateways: list[ServerThread], transport: str) -> None:
    port = free_port()  # nothing listens on it
    gw = start_gateway({
        "upstreams": [{"url": f"http://127.0.0.1:{port}"}], **APF_OFF,
        "proxy": {"transport": transport},
    })  # fmt: skip
    gateways.append(gw)
    r = httpx.get(gw.url + "/x")
    assert r.status_code == 502
    doc = r.json()
    assert doc["kind"] == "Status" and doc["code"] == 502 and "connect" in doc["message"]


def test_upstream_timeout_is_504_status(
    upstream: ServerThread, gateways: list[ServerThread], transport: str
) -> None:
    url = _gateway(gateways, upstream, transport, proxy={"readTimeout": "200ms"})
    r = httpx.get(url + "/hold/slow", timeout=5)
    httpx.get(upstream.url + "/release/slow")
    assert r.status_code == 504
    doc = r.json()
    assert doc["reason"] == "Timeout" and doc["code"] == 504
    metrics = httpx.get(url + "/metrics").text
    assert 'gateway_upstream_errors_total{kind="timeout"' in metrics


class _Fixed:
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": self.body})


def test_status_body_helper_is_valid_json() -> None:
    doc = json.loads(status_body(429, "slow down"))
    assert doc == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "slow down", "reason": "TooManyRequests", "code": 429,
    }  # fmt: skip


def test_h1_resends_when_a_kept_alive_connection_was_closed(
    gateways: list[ServerThread],
) -> None:
    """The upstream answers the first request on each connection and closes on the second,
    without a response: the race of an upstream's keep-alive timeout, made deterministic."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # second request on this connection: hang up
        writer.close()

    with raw_upstream(handle) as port:
        gw = start_gateway({
            "upstreams": [{"url": f"http://127.0.0.1:{port}"}], **APF_OFF,
            "proxy": {"transport": "h1"},
        })  # fmt: skip
        try:
            with httpx.Client(base_url=gw.url) as client:
                codes = [client.get("/x").status_code for _ in range(3)]
        finally:
            gw.stop()
    assert codes == [200, 200, 200]


@contextlib.contextmanager
def raw_upstream(handle: Any) -> Iterator[int]:
    """A bare asyncio TCP server in a thread, for upstream behaviour no ASGI server produces."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port: list[int] = []
    stop = loop.create_future()

    async def handle_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handle(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def serve() -> None:
        server = await asyncio.start_server(handle_and_close, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await stop
        server.close()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await server.wait_closed()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(5)
        loop.close()


RAW_RESPONSES = {
    "eof-delimited": b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello, until EOF",
    "interim-103": b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n"
    b"HTTP/1.1 200 OK\r\ncontent-length: 16\r\n\r\nhello, until EOF",
}


@pytest.mark.parametrize("kind", sorted(RAW_RESPONSES))
def test_unusual_upstream_responses(
    gateways: list[ServerThread], transport: str, kind: str
) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(RAW_RESPONSES[kind])
        await writer.drain()
        writer.close()

    with raw_upstream(handle) as port:
        gw = start_gateway({
            "upstreams": [{"url": f"http://127.0.0.1:{port}"}], **APF_OFF,
            "proxy": {"transport": transport},
        })  # fmt: skip
        try:
            r = httpx.get(gw.url + "/x", timeout=5)
        finally:
            gw.stop()
    assert (r.status_code, r.text) == (200, "hello, until EOF")


def test_reload_resizes_the_connection_pool_with_the_admitted_concurrency(
    upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    base = {"upstreams": [{"url": upstream.url}], **APF_OFF, "proxy": {"transport": "h1"}}
    small = {**base, "maxRequestsInflight": 2, "maxMutatingRequestsInflight": 1}
    gw = start_gateway(small)  # pool of 3 upstream connections
    gateways.append(gw)
    app: Gateway = gw.app
    larger = load_config([], {**base, "maxRequestsInflight": 5, "maxMutatingRequestsInflight": 1})
    gw.call(lambda: app.apply(larger))
    with ThreadPoolExecutor(5) as pool:
        calls = [pool.submit(httpx.get, f"{gw.url}/hold/{i}", timeout=10) for i in range(5)]
        try:
            # All five admitted requests reach the upstream: none waits for a connection.
            wait_until(lambda: len(holding(upstream)) == 5)
        finally:
            for i in range(5):
                httpx.get(f"{upstream.url}/release/{i}")
        assert [c.result().status_code for c in calls] == [200] * 5
