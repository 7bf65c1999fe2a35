"""An issuer's signing keys: OIDC discovery, then the JWKS, over HTTPS with the configured CA.

Requests never wait for a key the set already holds: a scheduled refresh runs in the
background once due, and a provider outage keeps the keys held (retried after
``retry_interval``). Only a token whose ``kid`` is unknown waits, for one fetch at most every
``min_refetch_interval`` (go-oidc's RemoteKeySet fetches on an unknown ``kid`` too). Time is
injected (``now``) so the schedule and the rate limit are tested with a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from gateway.asgi.authconfig import Issuer

log = logging.getLogger("gateway.authn.jwt")

MAX_DOCUMENT_BYTES = 1 << 20
FETCH_TIMEOUT = 10.0
FetchJSON = Callable[[str], Awaitable[Any]]


class KeyFetchError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class VerifyKey:
    """A public key of the issuer and the algorithm its JWK names, if it names one."""

    jwk: PyJWK
    alg: str | None


def https_fetcher(certificate_authority: str, timeout: float = FETCH_TIMEOUT) -> FetchJSON:
    """GET a JSON document over HTTPS, verified against the config's CA (else the system's)."""
    context = ssl.create_default_context(cadata=certificate_authority or None)

    async def fetch(url: str) -> Any:
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        try:
            async with (
                aiohttp.ClientSession(timeout=client_timeout) as session,
                session.get(url, ssl=context, allow_redirects=False) as response,
            ):
                if response.status != 200:
                    raise KeyFetchError(f"GET {url}: HTTP {response.status}")
                body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise KeyFetchError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        if len(body) > MAX_DOCUMENT_BYTES:
            raise KeyFetchError(f"GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise KeyFetchError(f"GET {url}: not JSON: {exc}") from None

    return fetch


class KeySet:
    def __init__(
        self,
        issuer: Issuer,
        *,
        now: Callable[[], float],
        fetch: FetchJSON | None = None,
        refresh_interval: float = 300.0,
        retry_interval: float = 10.0,
        min_refetch_interval: float = 10.0,
    ) -> None:
        self.issuer = issuer
        self.now = now
        self.fetch = fetch or https_fetcher(issuer.certificate_authority)
        self.refresh_interval = refresh_interval
        self.retry_interval = retry_interval
        self.min_refetch_interval = min_refetch_interval
        self.keys: dict[str, VerifyKey] = {}
        self.keyless: tuple[VerifyKey, ...] = ()
        self.generation = 0  # bumped whenever the held keys change
        self.next_refresh = 0.0  # due at once: the first request fetches
        self.last_fetch_start = -float("inf")
        self.fetches = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None
        self._raw = ""

    def same_source(self, issuer: Issuer) -> bool:
        """A reload keeps this set (and its keys) when the keys still come from the same place."""
        i = self.issuer
        return (i.url, i.discovery_url, i.certificate_authority) == (
            issuer.url, issuer.discovery_url, issuer.certificate_authority,
        )  # fmt: skip

    def find(self, kid: str | None) -> tuple[VerifyKey, ...]:
        if kid is None:
            return (*self.keys.values(), *self.keyless)
        key = self.keys.get(kid)
        return (key,) if key is not None else ()

    @property
    def has_keys(self) -> bool:
        return bool(self.keys or self.keyless)

    def refresh_if_due(self) -> None:
        """Start a background refresh when the schedule says so; never waits."""
        if self.now() >= self.next_refresh and self._task is None:
            self._start()

    async def refresh_for_unknown_kid(self) -> None:
        """Wait for one fetch, unless one started within ``min_refetch_interval`` (then only
        join one still running)."""
        if self._task is None:
            if self.now() - self.last_fetch_start < self.min_refetch_interval:
                return
            self._start()
        task = self._task
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        """Shutdown: cancel a refresh still running (it would outlive the event loop)."""
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _start(self) -> None:
        self.last_fetch_start = self.now()
        self._task = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            self.fetches += 1
            self._install(await self._fetch_jwks())
            self.next_refresh = self.now() + self.refresh_interval
        except (KeyFetchError, PyJWTError, ValueError) as exc:
            self.failures += 1
            self.next_refresh = self.now() + self.retry_interval
            held = "keeping the keys held" if self.has_keys else "no keys yet"
            log.warning("issuer %s: key refresh failed (%s): %s", self.issuer.url, held, exc)
        finally:
            self._task = None

    async def _fetch_jwks(self) -> Mapping[str, Any]:
        url = self.issuer.url.rstrip("/")
        discovery_url = self.issuer.discovery_url or f"{url}/.well-known/openid-configuration"
        doc = await self.fetch(discovery_url)
        if not isinstance(doc, Mapping):
            raise KeyFetchError(f"{discovery_url}: not a JSON object")
        if doc.get("issuer") != self.issuer.url:
            raise KeyFetchError(
                f"{discovery_url}: issuer {doc.get('issuer')!r} is not {self.issuer.url!r}"
            )
        jwks_uri = doc.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith("https://"):
            raise KeyFetchError(f"{discovery_url}: jwks_uri must be an https URL")
        jwks = await self.fetch(jwks_uri)
        if not isinstance(jwks, Mapping):
            raise KeyFetchError(f"{jwks_uri}: not a JSON object")
        return jwks

    def _install(self, jwks: Mapping[str, Any]) -> None:
        """Keep the usable signing keys (others, e.g. encryption keys, are skipped as go-jose
        skips them); a JWKS with none is an error, so the keys held stay."""
        raw_keys = jwks.get("keys")
        if not isinstance(raw_keys, list):
            raise KeyFetchError("the JWKS has no keys list")
        keys: dict[str, VerifyKey] = {}
        keyless: list[VerifyKey] = []
        for raw in raw_keys:
            if not isinstance(raw, dict) or raw.get("use") not in (None, "sig"):
                continue
            try:
                key = VerifyKey(
                    PyJWK(raw), raw.get("alg") if isinstance(raw.get("alg"), str) else None
                )
            except (PyJWTError, ValueError, TypeError):
                continue
            kid = raw.get("kid")
            if isinstance(kid, str) and kid:
                keys[kid] = key
            else:
                keyless.append(key)
        if not keys and not keyless:
            raise KeyFetchError("the JWKS holds no usable signing key")
        raw = json.dumps(jwks, sort_keys=True)
        if raw != self._raw:
            self.generation += 1
        self.keys, self.keyless, self._raw = keys, tuple(keyless), raw
