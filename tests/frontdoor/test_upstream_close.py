"""A gateway's stop closes every upstream connection of its ``h1`` transport, idle and in use,
and waits until each socket is closed: a transport still "closing" when the loop stops stays
open until a garbage collection finds it (in some later test, as a ResourceWarning), and its
upstream keeps a connection to a gateway that is gone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.proxy.h1_transport import H1UpstreamTransport
from gateway.proxy.transport import PoolLimits, Timeouts, UpstreamConnectError, UpstreamError
from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.support.wait import async_wait_until, wait_until

WATCH = "/api/v1/namespaces/ns/configmaps?watch=1"
LIST = "/api/v1/namespaces/ns/configmaps"


class CountingUpstream:
    """HTTP/1.1 on 127.0.0.1 (raw asyncio streams: every TCP connection is seen) that counts
    its connections and notices each one's end. A watch gets its headers and one event, then
    nothing until the gateway closes the connection; anything else a small keep-alive answer."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.opened = 0
        self.ended = 0
        self.watching = 0
        self.port = 0
        self._handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> CountingUpstream:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop
        ).result(10)
        self.port = server.sockets[0].getsockname()[1]
        self._server = server
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def open(self) -> int:
        return self.opened - self.ended

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = writer
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                if b"watch=1" in target:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"transfer-encoding: chunked\r\n\r\n"
                        b'11\r\n{"type":"ADDED"}\n\r\n'
                    )
                    self.watching += 1
                    await reader.read()  # nothing more is sent: until the gateway closes
                    self.watching -= 1
                    return
                writer.write(_small_list())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the gateway closed the connection
        finally:
            self.ended += 1
            self._handlers.pop(task, None)
            writer.close()

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for writer in self._handlers.values():  # connections a failed test left open
                writer.close()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def _small_list() -> bytes:
    body = b'{"kind":"ConfigMapList","items":[]}'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


@pytest.fixture
def upstream() -> Iterator[CountingUpstream]:
    server = CountingUpstream().start()
    yield server
    server.stop()


def test_stopping_closes_idle_and_in_use_upstream_connections(upstream: CountingUpstream) -> None:
    """Pooled (idle) connections from finished lists, and watches still streaming when the
    gateway stops: once the gateway's loop is gone, the upstream has seen every one end."""
    gw: ServerThread = start_gateway(
        # a watch still open at stop is cancelled after the grace period (the sleep that
        # uvicorn's graceful shutdown is); the lifespan's shutdown runs right after
        {"upstreams": [{"url": upstream.url}], "shutdownGracePeriod": 1}
    )
    clients = [httpx.Client(timeout=10) for _ in range(3)]
    responses: list[httpx.Response] = []
    try:
        with ThreadPoolExecutor(6) as pool:
            lists = [pool.submit(httpx.get, gw.url + LIST, timeout=10) for _ in range(6)]
            assert all(f.result().status_code == 200 for f in lists)
            for client in clients:
                request = client.build_request("GET", gw.url + WATCH)
                responses.append(client.send(request, stream=True))
        wait_until(lambda: upstream.watching == 3, 10, "3 watches at the upstream")
        assert all(r.status_code == 200 for r in responses)
        assert upstream.open >= 4  # the 3 watches and at least one pooled list connection
        gw.stop()
        assert not gw.thread.is_alive(), "the gateway did not stop"
        # The gateway's loop is closed: nothing of it closes a connection any more. A socket
        # it left open is closed only by a garbage collection (transport and protocol refer
        # to each other), with a ResourceWarning: the upstream sees no end until then.
        wait_until(
            lambda: upstream.open == 0, 10,
            lambda: f"the upstream to see all connections end: {upstream.open} of "
            f"{upstream.opened} still open",
        )  # fmt: skip
    finally:
        for r in responses:
            r.close()
        for client in clients:
            client.close()
        gw.stop()


async def test_aclose_closes_idle_and_in_use_connections_before_it_returns(
    upstream: CountingUpstream,
) -> None:
    """Two pooled connections and a watch still streaming: when ``aclose`` returns, every
    socket is closed (not closing: the loop may stop right then), the watch's reader fails
    instead of waiting for ever, and no connection is opened after it."""
    transport = H1UpstreamTransport(timeouts=Timeouts(), limits=PoolLimits())
    lists = await asyncio.gather(
        *(transport.send("GET", upstream.url + LIST, [], None) for _ in range(2))
    )
    assert [r.status for r in lists] == [200, 200]  # read whole: their connections are idle
    watch = await transport.send("GET", upstream.url + WATCH, [], None, long_running=True)
    idle = [conn for pool in transport._pools.values() for conn in pool.idle]
    assert len(idle) == 2 and upstream.opened == 3
    sockets = [conn.transport.get_extra_info("socket") for conn in [*idle, watch._conn]]

    await transport.aclose()

    assert [s.fileno() for s in sockets] == [-1, -1, -1]
    with pytest.raises(UpstreamError):
        async for _ in watch.stream():
            pass
    await watch.aclose()
    with pytest.raises(UpstreamConnectError):
        await transport.send("GET", upstream.url + LIST, [], None)
    await async_wait_until(lambda: upstream.open == 0, 10, "the upstream to see 3 ends")
    assert upstream.opened == 3
