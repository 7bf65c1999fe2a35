"""A loopback TCP switch for the rolling-restart scenario: the stand-in for a load balancer.

New client connections go to the current backend; ``switch`` points new connections at another
gateway while existing ones stay where they are until either side closes. When a backend
closes a connection the client side is closed too, so a client that finds its keep-alive
connection gone reconnects - through the switch, to the new gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading


class Balancer:
    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self.port = 0
        self.connections = 0
        self.connect_errors = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    def switch(self, backend_port: int) -> None:
        self.backend_port = backend_port

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _serve(self) -> None:
        """The switch's own thread: serve until stopped, then close every pipe and the loop."""
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            b_reader, b_writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
        except OSError:
            self.connect_errors += 1
            writer.close()
            return
        for w in (writer, b_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up = asyncio.ensure_future(_pipe(reader, b_writer))
        down = asyncio.ensure_future(_pipe(b_reader, writer))
        await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
        # Whichever side closed first, close both: the client must not keep a half-dead pipe.
        for task in (up, down):
            task.cancel()
        for w in (writer, b_writer):
            with contextlib.suppress(Exception):
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        return
