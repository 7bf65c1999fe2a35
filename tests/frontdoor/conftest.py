"""Real servers for front-door tests: uvicorn on 127.0.0.1 in threads, each with its own loop.

The upstream is a small raw ASGI app whose ``/hold/{id}`` requests stay open until the test
calls ``/release/{id}``, so saturation is reached by counting, never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.clock import EventClock
from gateway.http.types import ASGIApp, Receive, Scope, Send
from gateway.server import Gateway, uvicorn_config
from gateway.settings.sources import LoadedConfig, load_config
from tests.support.serving import started_port


class _Server(uvicorn.Server):
    """uvicorn looks at ``should_exit`` every 0.1 s; a test's ``stop`` also wakes it at once
    (teardown is most of many front-door tests' wall time)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.exit_now = asyncio.Event()

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exit_now.wait(), 0.1)

    def exit_soon(self) -> None:
        self.should_exit = True
        self.exit_now.set()


class ServerThread:
    def __init__(
        self, make_app: Callable[[asyncio.AbstractEventLoop], ASGIApp], *, lifespan: str = "off"
    ) -> None:
        self.make_app = make_app
        self.lifespan = lifespan
        self.loop = asyncio.new_event_loop()
        self.app: Any = None
        self.server: _Server | None = None
        self.port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.app = self.make_app(self.loop)
            self.server = _Server(self.config())
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            self.loop.close()

    def config(self) -> uvicorn.Config:
        if isinstance(self.app, Gateway):
            config = uvicorn_config(self.app, log_level="warning", port=0)
            config.host = "127.0.0.1"
            return config
        return uvicorn.Config(
            self.app, host="127.0.0.1", port=0, loop="none", http="httptools",
            lifespan=self.lifespan, log_level="warning", access_log=False,
        )  # fmt: skip

    async def _serve(self) -> None:
        assert self.server is not None
        task = asyncio.ensure_future(self.server.serve())
        self.port = await started_port(self.server, task)
        self._ready.set()
        await task

    def start(self) -> ServerThread:
        self.thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        assert self.port, "server did not start"
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop (the core is single-threaded) and return its result."""
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            box.append(fn())
            done.set()

        self.loop.call_soon_threadsafe(run)
        assert done.wait(5)
        return box[0]

    def stop(self) -> None:
        server = self.server
        if server is not None and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(server.exit_soon)
        self.thread.join(10)


class Upstream:
    """``/echo``: request as JSON; ``/hold/{id}``: open until ``/release/{id}``;
    ``/stream/{n}``: n chunks, the rest after ``/release/stream``; ``/watchlist/{n}``: a
    watch-list's n initial events, its ``k8s.io/initial-events-end`` bookmark after
    ``/release/bookmark`` (split over two chunks), the end after ``/release/stream``;
    ``/upload``: byte count. A held request or stream whose client (the gateway) closes the
    connection ends there, as a real server's would, its id in ``dropped``: a server stops
    (in a test's teardown) only once its requests have ended."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}
        self.holding: set[str] = set()
        self.dropped: list[str] = []

    def event(self, key: str) -> asyncio.Event:
        return self.events.setdefault(key, asyncio.Event())

    async def until(self, key: str, gone: asyncio.Future[None]) -> bool:
        """Wait for ``/release/{key}``: True, or False once the client has gone away
        (``gone``: ``_disconnected``'s task)."""
        released = asyncio.ensure_future(self.event(key).wait())
        try:
            await asyncio.wait((released, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()
        if released.done() and not released.cancelled():
            return True
        self.dropped.append(key)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        parts = path.strip("/").split("/")
        # Kubernetes-shaped paths map onto the same behaviours: .../hold/<id> etc.
        for i, p in enumerate(parts):
            if p in ("hold", "release", "stream", "watchlist", "echo", "upload", "holding"):
                parts = parts[i:]
                break
        if parts[0] in ("hold", "stream"):  # held until released, or the client leaves
            gone = asyncio.ensure_future(_disconnected(receive))
            try:
                await self._held(parts, gone, send)
            finally:
                gone.cancel()
        elif parts[0] == "release":
            self.event(parts[1]).set()
            await _reply(send, 200, b"ok")
        elif parts[0] == "holding":
            await _reply(send, 200, json.dumps(sorted(self.holding)).encode())
        elif parts[0] == "watchlist":
            await self._watch_list(send, int(parts[1]))
        elif parts[0] == "upload":
            total = 0
            chunks = 0
            while True:
                message = await receive()
                total += len(message.get("body", b""))
                chunks += 1
                if not message.get("more_body"):
                    break
            await _reply(send, 200, json.dumps({"bytes": total, "chunks": chunks}).encode())
        else:
            doc = {
                "method": scope["method"], "path": path,
                "query": scope["query_string"].decode(),
                "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            }  # fmt: skip
            await _reply(send, 200, json.dumps(doc).encode(), b"application/json")

    async def _held(self, parts: list[str], gone: asyncio.Future[None], send: Send) -> None:
        if parts[0] == "hold":
            key = parts[1]
            self.holding.add(key)
            try:
                if not await self.until(key, gone):
                    return
            finally:
                self.holding.discard(key)
            await _reply(send, 200, b"released " + key.encode())
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})  # fmt: skip
        for i in range(int(parts[1])):
            if i % 1024 == 0:
                # A send to a closed connection returns without suspending: let ``gone`` run.
                await asyncio.sleep(0)
            if gone.done():
                self.dropped.append("stream")
                return
            await send({"type": "http.response.body", "body": f"chunk{i}\n".encode(),
                        "more_body": True})  # fmt: skip
        if await self.until("stream", gone):
            await send({"type": "http.response.body", "body": b"end\n"})

    async def _watch_list(self, send: Send, events: int) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        for i in range(events):
            event = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": f"p{i}"}}}
            await send({"type": "http.response.body", "body": json.dumps(event).encode() + b"\n",
                        "more_body": True})  # fmt: skip
        await self.event("bookmark").wait()
        bookmark = json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {
            "resourceVersion": "9",
            "annotations": {"k8s.io/initial-events-end": "true"}}}}).encode() + b"\n"  # fmt: skip
        cut = bookmark.index(b"initial-events-end")
        for part in (bookmark[:cut], bookmark[cut:]):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await self.event("stream").wait()
        await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _reply(send: Send, code: int, body: bytes, ctype: bytes = b"text/plain") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})  # fmt: skip


@pytest.fixture
def upstream() -> Iterator[ServerThread]:
    server = ServerThread(lambda loop: Upstream()).start()
    yield server
    server.stop()


def start_gateway(
    overrides: dict[str, Any],
    paths: list[str] | None = None,
    clock: Callable[[asyncio.AbstractEventLoop], EventClock] | None = None,
) -> ServerThread:
    loaded: LoadedConfig = load_config(paths or [], overrides)

    def make(loop: asyncio.AbstractEventLoop) -> Gateway:
        return Gateway(loaded, loop=loop, clock=clock(loop) if clock else None)

    return ServerThread(make).start()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    """Threads for requests that must stay open while the test goes on."""
    with ThreadPoolExecutor(8) as ex:
        yield ex


@pytest.fixture
def gateways() -> Iterator[list[ServerThread]]:
    started: list[ServerThread] = []
    yield started
    for s in started:
        s.stop()


def holding(upstream: ServerThread) -> list[str]:
    return list(httpx.get(upstream.url + "/holding").json())
