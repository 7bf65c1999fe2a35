"""A middleware's own start and stop, run on the lifespan of the app it wraps.

A middleware that passes lifespan events through (``FlowControlMiddleware`` inside a Starlette
or FastAPI app, or wrapped around one by ``gateway.sidecar``) still has work tied to the event
loop: borrowing's timer, the JWT issuers' key refreshes. ``run_lifespan`` hands the events to
the app and runs ``startup`` when the app reads ``lifespan.startup`` (so the loop is running and
the app's own startup comes after), and ``shutdown`` when it reads ``lifespan.shutdown`` (the
server has stopped taking requests). An app that never reads the events (no lifespan support)
leaves both to the middleware's fallbacks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.http.types import ASGIApp, Message, Receive, Scope, Send


async def run_lifespan(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    startup: Callable[[], None],
    shutdown: Callable[[], Awaitable[None]],
) -> None:
    async def receive_with_hooks() -> Message:
        message = await receive()
        kind = message["type"]
        if kind == "lifespan.startup":
            startup()
        elif kind == "lifespan.shutdown":
            await shutdown()
        return message

    await app(scope, receive_with_hooks, send)
