"""The access log of a refused websocket handshake: the refusal is an HTTP answer
(``websocket.http.response.*``, ``gateway.http.websocket.http_send``), and its line has that
status and body size, and the answer carries the request ID, with the log on or off."""

from __future__ import annotations

import asyncio

import pytest

from gateway.accesslog.fields import Entry
from gateway.accesslog.middleware import RequestLog
from gateway.asgi.errorformat import send_refused
from gateway.asgi.refusal import RequestRefused
from gateway.http.types import Message, Receive, Scope, Send
from gateway.http.websocket import http_send


def _scope() -> Scope:
    return {
        "type": "websocket", "path": "/api/v1/watch", "raw_path": b"/api/v1/watch",
        "query_string": b"", "headers": [(b"host", b"gw")], "client": ("127.0.0.1", 5000),
        "extensions": {"websocket.http.response": {}},
    }  # fmt: skip


async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
    await send_refused(scope, http_send(scope, send), RequestRefused("bad path"), None)


@pytest.mark.parametrize("enabled", [True, False])
def test_refused_handshake_is_logged_with_its_status_and_carries_the_id(enabled: bool) -> None:
    entries: list[Entry] = []
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    log = RequestLog(_refuse, submit=entries.append, enabled=enabled)
    asyncio.run(log(_scope(), receive, send))

    start, *bodies = sent
    assert start["type"] == "websocket.http.response.start" and start["status"] == 400
    ids = [v for k, v in start["headers"] if k == b"x-request-id"]
    assert len(ids) == 1 and len(ids[0]) == 32
    if not enabled:
        assert entries == []
        return
    (entry,) = entries
    assert entry.status == 400 and entry.request_id == ids[0].decode()
    assert entry.generated
    assert entry.bytes_out == sum(len(b.get("body", b"")) for b in bodies) > 0
