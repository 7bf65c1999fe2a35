"""The front door's listening sockets, bound before anything starts.

``apf-gateway serve`` binds its address itself and hands the sockets to uvicorn, so a taken
port is one line and exit code 2 before the gateway starts (as ``apf-gateway up`` does),
instead of uvicorn's startup, error and shutdown log and its exit code 3. Binding follows
``asyncio``'s ``create_server(host=...)``, which uvicorn would have used: every address the
host resolves to, ``SO_REUSEADDR``, IPv6 sockets IPv6-only.
"""

from __future__ import annotations

import contextlib
import socket

BACKLOG = 2048  # uvicorn's default; its server listens again with its configured backlog


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address of ``host``; ``OSError`` says why not (the sockets
    already bound are closed)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(
            (i[0], i[1], i[2], i[3], i[4]) for i in infos
        ):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        raise
    return sockets


def reason(exc: BaseException) -> str:
    """An error for one line: the OS's words and the file, not errno numbers."""
    if isinstance(exc, socket.gaierror):
        return exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc)
