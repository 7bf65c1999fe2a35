"""Refusing a WebSocket handshake with the HTTP answer a plain request would get.

The front door answers a handshake it will not accept (401, 403, 429, 404, 502, 504) before
``websocket.accept``. ASGI's ``websocket.http.response`` extension lets the app send that answer
as an HTTP response; uvicorn's websocket implementations offer it. Where a server lacks it,
``websocket.close`` before accept is all there is (uvicorn turns it into a bare 403; other
servers into a close code), so the status is mapped to the closest close code (RFC 6455 7.4.1,
IANA registry). Every refusal path writes ``http.response.*`` messages once, through this.
"""

from __future__ import annotations

from gateway.http.types import Message, Scope, Send

EXTENSION = "websocket.http.response"
# The messages that end a websocket's handshake: its seats (or its max-in-flight count) go back.
ANSWERED = frozenset({"websocket.accept", "websocket.close", "websocket.http.response.body"})


def close_code(status: int) -> int:
    """The close code for an HTTP refusal when no HTTP answer can be sent."""
    if status in (429, 503):
        return 1013  # try again later
    if status == 502:
        return 1014  # bad gateway
    if status >= 500:
        return 1011  # internal error
    return 1008  # policy violation: 400, 401, 403, 404 ...


def supports_http_response(scope: Scope) -> bool:
    extensions = scope.get("extensions") or {}
    return EXTENSION in extensions


def http_send(scope: Scope, send: Send) -> Send:
    """``send`` for a refusal written as ``http.response.*`` messages: as is for an HTTP
    scope; for a websocket scope, the ``websocket.http.response.*`` messages of the same
    response, or a ``websocket.close`` with ``close_code(status)`` without the extension."""
    if scope["type"] != "websocket":
        return send
    if supports_http_response(scope):

        async def as_http_response(message: Message) -> None:
            t = message["type"]
            if t == "http.response.start":
                message = {**message, "type": "websocket.http.response.start"}
            elif t == "http.response.body":
                message = {**message, "type": "websocket.http.response.body"}
            await send(message)

        return as_http_response
    status = 0

    async def as_close(message: Message) -> None:
        nonlocal status
        t = message["type"]
        if t == "http.response.start":
            status = int(message["status"])
        elif t == "http.response.body":
            if not message.get("more_body"):
                await send({"type": "websocket.close", "code": close_code(status)})
        else:
            await send(message)

    return as_close
