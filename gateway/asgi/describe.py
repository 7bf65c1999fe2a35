"""The request digest: authenticate, then parse what is asked for.

Both collaborators are replaceable attributes so a configuration reload can swap them between
two requests without touching requests already described.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING

from gateway.asgi.authn import (
    RequestAuthenticator,
    Unauthorized,
    authenticator_from_settings,
    file_digest,
)
from gateway.asgi.requestinfo import RequestInfoParser, RouteTemplate
from gateway.flowcontrol.digest import RequestDigest
from gateway.flowcontrol.stats import Histogram
from gateway.http.types import Scope
from gateway.reconfigure import Swap, assign

# kube-apiserver's authentication_duration_seconds: ExponentialBuckets(0.001, 2, 15).
AUTHENTICATION_BUCKETS = tuple(0.001 * 2**i for i in range(15))

if TYPE_CHECKING:
    from gateway.settings.model import AuthenticationSettings, RouteTemplateSettings


Templates = tuple["RouteTemplateSettings", ...]


def parser_from(templates: Templates) -> RequestInfoParser:
    return RequestInfoParser(
        tuple(
            RouteTemplate(t.path, t.resource, t.api_group, t.api_version, t.long_running)
            for t in templates
        )
    )


class RequestDescriber:
    """Digests are cached by (user, method, path, query): most traffic repeats a small set of
    requests, and parsing a path costs more than admitting the request."""

    CACHE_SIZE = 8192

    def __init__(self, authenticator: RequestAuthenticator, parser: RequestInfoParser) -> None:
        self.authenticator = authenticator
        self._parser = parser
        self._cache: dict[tuple[object, ...], RequestDigest] = {}
        # Told of each reload that finds --authentication-config changed (kube's reload metric).
        self.on_authentication_config_reload: Callable[[bool], None] | None = None
        # Told of every TokenReview call (code, seconds): the webhook's metrics.
        self.on_webhook_request: Callable[[str, float], None] | None = None
        # Told of every uncached JWT verification (issuer hash, result, seconds).
        self.on_jwt_verify: Callable[[str, str, float], None] | None = None
        # kube's authentication_attempts{result} and authentication_duration_seconds{result}:
        # kept here, across reloads.
        self.attempts = {"success": 0, "failure": 0}
        self.durations = {r: Histogram(AUTHENTICATION_BUCKETS) for r in ("success", "failure")}

    @classmethod
    def from_settings(
        cls, authentication: AuthenticationSettings, route_templates: Templates
    ) -> RequestDescriber:
        """Reads the credential files; raises ``CredentialFileError``/``ValueError``."""
        return cls(authenticator_from_settings(authentication), parser_from(route_templates))

    def prepare(self, authentication: AuthenticationSettings, route_templates: Templates) -> Swap:
        """A reload (``gateway.reconfigure``): reads the credential files here (in the reload
        worker thread); the swap changes identities and routes between two requests."""
        path = authentication.authentication_config
        changed = bool(path) and file_digest(path) != self.authenticator.config_digest
        try:
            authenticator = authenticator_from_settings(authentication, self.authenticator)
        except ValueError:
            if changed and self.on_authentication_config_reload is not None:
                self.on_authentication_config_reload(False)
            raise
        if changed and self.on_authentication_config_reload is not None:
            self.on_authentication_config_reload(True)
        self.wire(authenticator)
        return assign(self, authenticator=authenticator, parser=parser_from(route_templates))

    def wire(self, authenticator: RequestAuthenticator) -> None:
        """Connect an authenticator's network-facing parts to the metrics."""
        if authenticator.webhook is not None:
            authenticator.webhook.observe = self.on_webhook_request
        if authenticator.jwt is not None:
            authenticator.jwt.observe = self.on_jwt_verify

    @property
    def parser(self) -> RequestInfoParser:
        return self._parser

    @parser.setter
    def parser(self, parser: RequestInfoParser) -> None:
        self._parser = parser
        self._cache = {}

    def describe(self, scope: Scope) -> RequestDigest:
        """Raises ``RequestRefused`` (``Unauthorized``, ``RequestInfoError``)."""
        start = perf_counter()
        try:
            user = self.authenticator.authenticate(scope)
        except Unauthorized:
            self.attempts["failure"] += 1
            self.durations["failure"].observe(perf_counter() - start)
            raise
        self.attempts["success"] += 1
        self.durations["success"].observe(perf_counter() - start)
        method = scope.get("method", "GET")  # websocket handshakes are GETs
        key = (user, method, scope["path"], scope["query_string"])
        found = self._cache.get(key)
        if found is not None:
            return found
        info, long_running = self._parser.parse(method, scope["path"], scope["query_string"])
        found = RequestDigest(user, info, long_running)
        if len(self._cache) >= self.CACHE_SIZE:
            self._cache = {}
        self._cache[key] = found
        return found
