"""A slow upstream for load tests: every request takes a fixed service time.

A fixed, known service time is what turns APF seats into a capacity in requests per second
(capacity = seats / service time), so fair shares can be computed from the scenario alone.
Kubernetes-style list paths answer a ``...List`` with ``--list-items`` items, which is what the
gateway's list estimator learns collection sizes from. The service time actually slept is
returned in ``X-Service-Time`` so clients can subtract it from latency to get the wait.

Run: ``python -m loadtests.upstream --service-time 0.1 --port 0``; prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from typing import Any

import uvicorn

Scope = dict[str, Any]


class SlowApp:
    def __init__(self, service_time: float, list_items: int, list_factor: float) -> None:
        self.service_time = service_time
        self.list_items = list_items
        # Lists take list_factor times the base service time (wide requests are slower).
        self.list_factor = list_factor
        self.items = [{"metadata": {"name": f"obj-{i}"}} for i in range(list_items)]
        self.served = 0

    def _service_time(self, scope: Scope, is_list: bool) -> float:
        for part in scope.get("query_string", b"").decode().split("&"):
            key, _, value = part.partition("=")
            if key == "serviceTime":
                try:
                    return max(0.0, float(value))
                except ValueError:
                    break
        return self.service_time * (self.list_factor if is_list else 1.0)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        while True:  # drain the request body
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        path: str = scope["path"]
        method: str = scope["method"]
        parts = [p for p in path.split("/") if p]
        # /api/v1/namespaces/NS/RESOURCE (6 parts: list) vs .../RESOURCE/NAME (get)
        is_list = method == "GET" and path.startswith("/api") and len(parts) % 2 == 1
        delay = self._service_time(scope, is_list)
        if delay > 0:
            await asyncio.sleep(delay)
        self.served += 1
        status = 201 if method == "POST" else 200
        body: dict[str, Any]
        if is_list:
            body = {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": self.items}
        else:
            body = {"kind": "Status", "status": "Success", "path": path, "method": method}
        data = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"x-service-time", f"{delay:.6f}".encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.upstream", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--service-time", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--list-items", type=int, default=50, help="items in list responses")
    parser.add_argument("--list-factor", type=float, default=1.0, help="list service time factor")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("the load-test upstream serves loopback only")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    app = SlowApp(args.service_time, args.list_items, args.list_factor)
    config = uvicorn.Config(
        app,
        http="httptools",
        loop="none",
        access_log=False,
        log_level="warning",
        lifespan="on",
        server_header=False,
        date_header=False,
        backlog=2048,
    )
    server = uvicorn.Server(config)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    import uvloop  # noqa: PLC0415 - optional uvloop

    uvloop.run(server.serve(sockets=[sock]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
