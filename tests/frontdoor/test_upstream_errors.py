"""One upstream-error mapping for all transports: the same failure gets the same status, kind
and body whichever library talks to the upstream (``UpstreamError.status``, mapped once in
``gateway.proxy.app``)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.support.ports import free_port

TRANSPORTS = ["h1", "aiohttp", "httpx", "httpx-aiohttp"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.contextmanager
def raw_upstream(answer: bool) -> Iterator[str]:
    """A socket server that reads each request, then closes (``answer`` False: no response
    at all) or holds the connection open without a byte (``answer`` True: never answers)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with contextlib.suppress(OSError):
                conn.recv(65536)
            if answer:
                held.append(conn)
            else:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone does not)
        listener.close()
        thread.join(5)
        assert not thread.is_alive()
        for conn in held:
            conn.close()


def _status_of(gw: ServerThread) -> tuple[int, str, str]:
    r = httpx.get(gw.url + "/x", timeout=10)
    doc = r.json()
    assert doc["kind"] == "Status" and doc["code"] == r.status_code
    return r.status_code, doc["reason"], doc["message"]


def _start(gateways: list[ServerThread], url: str, transport: str) -> ServerThread:
    gw = start_gateway({
        "upstreams": [{"url": url}], "enablePriorityAndFairness": False,
        "proxy": {"transport": transport, "readTimeout": "200ms"},
    })  # fmt: skip
    gateways.append(gw)
    return gw


def test_refused_connection_is_502_connect(gateways: list[ServerThread], transport: str) -> None:
    port = free_port()  # nothing listens on it
    gw = _start(gateways, f"http://127.0.0.1:{port}", transport)
    status, _, message = _status_of(gw)
    assert status == 502 and f"127.0.0.1:{port}: connect:" in message


@pytest.mark.parametrize(
    ("answer", "status", "kind"),
    [(False, 502, "protocol"), (True, 504, "timeout")],
    ids=["closed-without-a-response", "silent-past-the-read-timeout"],
)
def test_an_upstream_that_accepts_but_does_not_answer(
    gateways: list[ServerThread], transport: str, answer: bool, status: int, kind: str
) -> None:
    with raw_upstream(answer=answer) as url:
        gw = _start(gateways, url, transport)
        got, _, message = _status_of(gw)
        metrics = httpx.get(gw.url + "/metrics").text
    assert got == status and f"{url}: {kind}:" in message
    assert f'gateway_upstream_errors_total{{kind="{kind}"' in metrics
