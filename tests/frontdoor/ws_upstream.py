"""A real WebSocket upstream (aiohttp.web on 127.0.0.1, in its own thread) for the relay tests.

- ``/echo``: echoes text as text and binary as binary. Commands in text messages:
  ``close:CODE:REASON`` closes, ``drop`` drops the connection, ``big:N`` sends N bytes,
  ``flood:N:SIZE`` sends N binary messages, ``ping`` pings the gateway.
- ``/exec``: kube-apiserver's ``v5.channel.k8s.io`` exec stream (stdin echoed to stdout,
  resize recorded, stdin's close signal ends with a Success status on the error channel).
- ``/portforward``: ``portforward.k8s.io`` (each channel starts with its port, little-endian;
  data is echoed).
- ``/refuse``: a 403 with a Status body.
- ``/reject/slow``: a handshake answered only after ``answer_slow()``; ``/reject/echo``: echo.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
import threading
from typing import Any

from aiohttp import WSMsgType, web

EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
SUCCESS = {"metadata": {}, "status": "Success"}


class WebSocketUpstream:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context  # serve wss:// (https:// routes)
        self.loop = asyncio.new_event_loop()
        self.events: list[tuple[str, Any]] = []  # what the upstream saw, in order
        self.port = 0
        self.flooding: list[bool] = []  # one entry per flood message sent
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._answer: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def seen(self, kind: str) -> list[Any]:
        return [v for k, v in list(self.events) if k == kind]

    def start(self) -> WebSocketUpstream:
        self.thread.start()
        assert self._ready.wait(10), "websocket upstream did not start"
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self.loop.close()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/echo", self.echo)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/exec", self.exec)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/portforward", self.portforward)
        app.router.add_get("/refuse", self.refuse)
        app.router.add_get("/reject/echo", self.echo)
        app.router.add_get("/reject/slow", self.slow)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._stop = asyncio.Event()
        self._answer = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def answer_slow(self) -> None:
        """Let ``/reject/slow`` handshakes be answered."""
        assert self._answer is not None
        self.loop.call_soon_threadsafe(self._answer.set)

    async def slow(self, request: web.Request) -> web.WebSocketResponse:
        """A handshake answered only after ``answer_slow()``, then an echo."""
        assert self._answer is not None
        self.events.append(("slow", "waiting"))
        await self._answer.wait()
        return await self.echo(request)

    async def refuse(self, request: web.Request) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403}
        return web.json_response(body, status=403)

    async def echo(self, request: web.Request) -> web.WebSocketResponse:
        self.events.append(("headers", {k.lower(): v for k, v in request.headers.items()}))
        ws = web.WebSocketResponse(
            protocols=("chat.v2", "chat.v1"), autoping=False, max_msg_size=64 * 1024 * 1024
        )
        await ws.prepare(request)
        self.events.append(("protocol", ws.ws_protocol))
        while True:
            msg = await ws.receive()
            if msg.type is WSMsgType.CLOSE:  # the peer's close: its code and reason
                self.events.append(("closed", (msg.data, msg.extra)))
                break
            if msg.type in (WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR):
                self.events.append(("closed", (ws.close_code, None)))
                break
            if msg.type is WSMsgType.PING:
                await ws.pong(msg.data)
            elif msg.type is WSMsgType.PONG:
                self.events.append(("pong", msg.data))
            elif msg.type is WSMsgType.BINARY:
                self.events.append(("binary", len(msg.data)))
                await ws.send_bytes(msg.data)
            elif msg.type is WSMsgType.TEXT:
                self.events.append(("text", msg.data))
                if await self._command(ws, msg.data, request.transport):
                    continue
                await ws.send_str(msg.data)
        return ws

    async def _command(
        self, ws: web.WebSocketResponse, text: str, request_transport: Any = None
    ) -> bool:
        word, _, rest = text.partition(":")
        if word == "close":
            code, _, reason = rest.partition(":")
            await ws.close(code=int(code), message=reason.encode())
        elif word == "big":
            await ws.send_bytes(b"b" * int(rest))
        elif word == "flood":
            count, _, size = rest.partition(":")
            for _ in range(int(count)):
                await ws.send_bytes(b"f" * int(size))
                self.flooding.append(True)
        elif word == "drop":  # the connection, without a close frame
            assert request_transport is not None
            request_transport.abort()
        elif word == "ping":
            await ws.ping(b"from-upstream")
        else:
            return False
        return True

    async def exec(self, request: web.Request) -> web.WebSocketResponse:
        self.events.append(("query", request.query_string))
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS)
        await ws.prepare(request)
        self.events.append(("protocol", ws.ws_protocol))
        async for msg in ws:
            if msg.type is not WSMsgType.BINARY:
                self.events.append(("not-binary", msg.type))
                continue
            stream, data = msg.data[0], msg.data[1:]
            self.events.append(("frame", bytes(msg.data)))
            if stream == 0:  # stdin: echoed on stdout, upper-cased on stderr
                await ws.send_bytes(b"\x01" + data)
                await ws.send_bytes(b"\x02" + data.upper())
            elif stream == 4:  # resize
                self.events.append(("resize", json.loads(data)))
            elif stream == 255 and data == b"\x00":  # v5: stdin closed
                await ws.send_bytes(b"\x03" + json.dumps(SUCCESS).encode())
                await ws.close(code=1000)
        return ws

    async def portforward(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("portforward.k8s.io",))
        await ws.prepare(request)
        self.events.append(("protocol", ws.ws_protocol))
        port = int(request.query["ports"])
        for channel in (0, 1):  # data and error channel of the first port
            await ws.send_bytes(bytes([channel]) + struct.pack("<H", port))
        async for msg in ws:
            if msg.type is WSMsgType.BINARY and msg.data[:1] == b"\x00":
                self.events.append(("frame", bytes(msg.data)))
                await ws.send_bytes(b"\x00" + msg.data[1:][::-1])
        return ws
