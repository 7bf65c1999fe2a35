"""The client certificate a TLS connection presented, as the request scope carries it.

The TLS listener asks for a certificate without verifying it (``gateway.serving.peercert``);
each authenticator verifies it against its own CA bundle, once per connection and bundle:
``verified`` keeps the outcome per verifier until ``until`` (the chain's expiry).
"""

from __future__ import annotations

from gateway.http.types import ASGIApp, Receive, Scope, Send

# The scope key: absent when the connection presented no certificate (or is plain HTTP).
PEER_CERTIFICATES = "gateway.peer_certificates"
# Verification outcomes kept per connection (one per CA bundle; a reload adds one).
_MAX_CACHED = 4


class PeerCertificates:
    __slots__ = ("chain", "verified")

    def __init__(self, chain: tuple[bytes, ...]) -> None:
        self.chain = chain  # DER, leaf first
        self.verified: dict[object, tuple[object, float]] = {}

    def cached(self, verifier: object, now: float) -> object | None:
        found = self.verified.get(verifier)
        if found is None or now >= found[1]:
            return None
        return found[0]

    def remember(self, verifier: object, outcome: object, until: float) -> None:
        if len(self.verified) >= _MAX_CACHED:
            self.verified.clear()
        self.verified[verifier] = (outcome, until)


class WithPeerCertificates:
    """Wraps the app for one connection that presented a certificate: puts it in each scope."""

    __slots__ = ("app", "peer")

    def __init__(self, app: ASGIApp, peer: PeerCertificates) -> None:
        self.app = app
        self.peer = peer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[PEER_CERTIFICATES] = self.peer
        await self.app(scope, receive, send)
