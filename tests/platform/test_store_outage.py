"""Issue 21 item 5: a store outage does not stop warm invocations (real router and manager
processes, real PostgreSQL behind a TCP proxy on 127.0.0.1 that the test stops and starts).

While the store is unreachable a router serves the last action document it read, answers 503
with ``Retry-After`` and OpenWhisk's error body to what needs the store, keeps activation
records in memory and writes them once the store is back; its log gets one line when the
outage starts and one when it ends, no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import httpx
import pytest
from platform_support import Platform, Proc, action_url, invoke, openwhisk_error, put_action

from tests.store.conftest import PG_DSN, drop_schema, postgres_unavailable
from tests.support.wait import async_wait_until

pytestmark = pytest.mark.postgres

ECHO = "def main(args):\n    return {'echo': args.get('n')}\n"


class TcpProxy:
    """127.0.0.1:PORT -> 127.0.0.1:5432 on an event loop of its own (a thread: the test's
    loop blocks while it starts processes); ``stop`` closes the listener and every connection
    (the store's pooled ones included), ``start`` listens on the same port again."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _do(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def start(self) -> None:
        self._do(self._start())

    def stop(self) -> None:
        self._do(self._stop())

    def close(self) -> None:
        if self._server is not None:
            self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 5432)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


@pytest.fixture
async def proxied_store(platform: Platform) -> AsyncIterator[TcpProxy]:
    reason = await postgres_unavailable()
    if reason:
        pytest.skip(reason)
    proxy = TcpProxy()
    proxy.start()
    schema = f"apf_test_{uuid.uuid4().hex[:12]}"
    platform.store = f"{PG_DSN.replace(':5432', f':{proxy.port}')}?schema={schema}"
    try:
        yield proxy
    finally:
        platform.close()
        proxy.close()
        await drop_schema(schema)


def outage_lines(log: str) -> tuple[list[str], list[str]]:
    lines = log.splitlines()
    return (
        [line for line in lines if "store unreachable" in line],
        [line for line in lines if "store reachable again" in line],
    )


async def warm_router(platform: Platform, client: httpx.AsyncClient, *flags: str) -> Proc:
    """A manager and a router ``r1`` that has run ``echo`` once (its container is warm)."""
    platform.start_manager()
    router = platform.start_router("r1", *flags)
    await put_action(client, router, "echo", ECHO)
    warm = await invoke(client, router, "echo", {"n": 0})
    assert warm.status_code == 200, warm.text
    return router


async def test_warm_invokes_survive_a_store_outage(
    platform: Platform, client: httpx.AsyncClient, proxied_store: TcpProxy
) -> None:
    # every invoke reads the action from the store (no cache time): the outage is met at once
    router = await warm_router(platform, client, "--action-cache-seconds", "0")

    proxied_store.stop()
    answers = [await invoke(client, router, "echo", {"n": n}) for n in range(1, 11)]
    assert [r.status_code for r in answers] == [200] * 10, [r.text for r in answers]
    assert [r.json()["response"]["result"] for r in answers] == [{"echo": n} for n in range(1, 11)]
    detached = await invoke(client, router, "echo", {"n": 11}, query="blocking=false")
    assert detached.status_code == 202, detached.text

    # what needs the store: 503, Retry-After, OpenWhisk's error body
    refused = [
        await client.get(action_url(router, "echo")),
        await client.put(
            action_url(router, "other"), json={"exec": {"kind": "python:3", "code": ECHO}}
        ),
        await invoke(client, router, "never-read", {}),
        await client.get(f"{router.url}/api/v1/namespaces/_/actions"),
    ]
    for resp in refused:
        assert "unreachable" in openwhisk_error(resp, 503)
        assert resp.headers["Retry-After"] == "5"
    # an activation still waiting to be written is answered from the router's memory
    aid = answers[0].json()["activationId"]
    pending = await client.get(f"{router.url}/api/v1/namespaces/_/activations/{aid}")
    assert pending.status_code == 200 and pending.json()["response"]["result"] == {"echo": 1}

    proxied_store.start()
    log = platform.root / "router-r1.log"
    await async_wait_until(
        lambda: bool(outage_lines(log.read_text())[1]), what="the router to see the store back"
    )
    # the buffered records reach the store
    for resp in (*answers, detached):
        aid = resp.json()["activationId"]
        url = f"{router.url}/api/v1/namespaces/_/activations/{aid}"

        async def stored(url: str = url) -> bool:
            return (await client.get(url)).status_code == 200

        await async_wait_until(stored, what=f"activation {aid} written after the outage")
    router.stop()
    down, back = outage_lines(log.read_text())
    assert len(down) == 1 and len(back) == 1, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


async def test_a_router_stopped_during_an_outage_says_what_it_could_not_write(
    platform: Platform, client: httpx.AsyncClient, proxied_store: TcpProxy
) -> None:
    router = await warm_router(platform, client, "--store-timeout", "1")
    proxied_store.stop()
    for n in (1, 2):  # within the action cache time or not: served either way
        assert (await invoke(client, router, "echo", {"n": n})).status_code == 200
    assert router.stop() == 0
    log = (platform.root / "router-r1.log").read_text()
    # the two run during the outage (and the first, if it was not written before it began)
    lost = re.search(r"stopping with (\d+) activation records not written", log)
    assert lost is not None and int(lost[1]) in (2, 3), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


async def test_an_action_evicted_from_the_cache_is_refused_during_an_outage(
    platform: Platform, client: httpx.AsyncClient, proxied_store: TcpProxy
) -> None:
    """The cache's bound holds during an outage too: what it let go of cannot be served."""
    router = await warm_router(platform, client, "--action-cache-entries", "1")
    await put_action(client, router, "other", ECHO)
    assert (await invoke(client, router, "other", {"n": 1})).status_code == 200  # echo goes

    proxied_store.stop()
    kept = await invoke(client, router, "other", {"n": 2})
    assert kept.status_code == 200 and kept.json()["response"]["result"] == {"echo": 2}
    evicted = await invoke(client, router, "echo", {"n": 3})
    assert "unreachable" in openwhisk_error(evicted, 503)
    assert evicted.headers["Retry-After"] == "5"
    proxied_store.start()

    async def served() -> bool:
        return (await invoke(client, router, "echo", {"n": 4})).status_code == 200

    await async_wait_until(served, what="the evicted action read again once the store is back")
