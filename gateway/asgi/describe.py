"""The request digest: authenticate, then parse what is asked for.

Both collaborators are replaceable attributes so a configuration reload can swap them between
two requests without touching requests already described.
"""

from __future__ import annotations

from gateway.asgi.authn import RequestAuthenticator
from gateway.asgi.requestinfo import RequestInfoParser
from gateway.flowcontrol.digest import RequestDigest
from gateway.http.status import send_status
from gateway.http.types import Scope, Send

DIGEST_KEY = "gateway.digest"
# True for every long-running request, watches included (the proxy gives them their own pool).
LONG_RUNNING_KEY = "gateway.long_running"


class RequestDescriber:
    def __init__(self, authenticator: RequestAuthenticator, parser: RequestInfoParser) -> None:
        self.authenticator = authenticator
        self.parser = parser

    def describe(self, scope: Scope) -> tuple[RequestDigest, bool]:
        """The digest and whether the request is long-running. Raises ``Unauthorized``."""
        user = self.authenticator.authenticate(scope)
        method = scope.get("method", "GET")  # websocket handshakes are GETs
        info, long_running = self.parser.parse(method, scope["path"], scope["query_string"])
        digest = RequestDigest(user, info, long_running and info.verb != "watch")
        return digest, long_running


async def send_unauthorized(send: Send, message: str) -> None:
    await send_status(send, 401, f"Unauthorized: {message}", reason="Unauthorized")
