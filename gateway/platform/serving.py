"""Run an aiohttp application until SIGINT/SIGTERM, announcing its URL on stdout.

Processes started by ``apf-gateway up`` and the tests bind port 0 and read the first stdout
line, ``LISTENING http://HOST:PORT``, to learn where they listen.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web


def parse_listen(value: str, default_port: int = 0) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        return value or "127.0.0.1", default_port
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        raise ValueError(f"bad port in {value!r}: expected HOST:PORT")
    return host, int(port)


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket; ``reuse_port`` lets several processes share the port (the kernel
    spreads connections over them), which is how ``apf-gateway up`` fronts N routers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


Drain = Callable[[], Awaitable[None]]


async def serve_until_signal(
    app: web.Application, sock: socket.socket, *more: socket.socket, drain: Drain | None = None
) -> None:
    """Serve on ``sock`` (announced) and ``more`` sockets until SIGINT/SIGTERM. On SIGTERM
    (an orchestrator, a supervisor that died) await ``drain`` first, still serving: peers
    may need us while they finish. SIGINT (Ctrl-C, a supervisor stopping its children in
    order) stops at once."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=30.0)
    await runner.setup()
    for s in (sock, *more):
        await web.SockSite(runner, s).start()
    print(f"LISTENING {url_of(sock)}", flush=True)
    stop = asyncio.Event()
    received: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await stop.wait()
        if drain is not None and received[:1] == [signal.SIGTERM]:
            await drain()
    finally:
        await runner.cleanup()


def run(app: web.Application, listen: str, drain: Drain | None = None) -> int:
    try:
        host, port = parse_listen(listen)
        sock = bind(host, port)
    except (ValueError, OSError) as exc:
        print(f"cannot listen on {listen}: {exc}", file=sys.stderr)
        return 2
    run_async(serve_until_signal(app, sock, drain=drain))
    return 0


def run_async(coro: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run`` on uvloop when available (it ships with ``uvicorn[standard]``)."""
    try:
        import uvloop  # noqa: PLC0415 - optional uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(coro)
