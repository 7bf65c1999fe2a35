"""Webhook token authentication: kube-apiserver's ``--authentication-token-webhook-config-file``.

The file is a kubeconfig naming the webhook (``clusters[0].cluster.server``, its CA, and the
credentials we present); a bearer token is sent as a ``TokenReview``
(``authentication.k8s.io/v1``). As kube's token cache does (``tokencache.New(webhook, false,
ttl, ttl)``), authenticated and unauthenticated answers are both cached for ``cacheTTL``
(default 2m) and errors are not cached. The call happens in ``prefetch`` (awaited before
``authenticate``), bounded in time and in concurrency; a webhook that fails or times out gives
no answer, so the request gets 401, never anonymous. Tokens are cached by their SHA-256 only.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yaml

from gateway.asgi.credentials import with_authenticated
from gateway.flowcontrol.digest import UserInfo
from gateway.settings.load import CredentialFileError

log = logging.getLogger("gateway.authn.webhook")
CACHE_SIZE = 10_000
MAX_RESPONSE_BYTES = 1 << 20
# kube's apiserver_delegated_authn_request_duration_seconds buckets
LATENCY_BUCKETS = (0.25, 0.5, 0.7, 1.0, 1.5, 3.0, 5.0, 10.0)


class WebhookRefused(Exception):
    """The webhook said no, or gave no answer; the reason never holds the token."""


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    server: str
    ca_data: str = ""  # PEM
    client_certificate: str = ""  # files
    client_key: str = ""
    token: str = ""


def load_webhook_config(path: str | Path) -> WebhookConfig:
    """The first cluster and user of a kubeconfig (as kube's webhook client reads it)."""
    source = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CredentialFileError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CredentialFileError(f"{source}: not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise CredentialFileError(f"{source}: expected a kubeconfig (kind: Config)")
    base = Path(path).parent

    def first(key: str, inner: str) -> dict[str, Any]:
        items = doc.get(key)
        if not isinstance(items, list) or not items or not isinstance(items[0], dict):
            return {}
        value = items[0].get(inner)
        return value if isinstance(value, dict) else {}

    cluster, user = first("clusters", "cluster"), first("users", "user")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise CredentialFileError(f"{source}: clusters[0].cluster.server: Required value")
    if urlsplit(server).scheme not in ("https", "http"):
        raise CredentialFileError(f"{source}: clusters[0].cluster.server: must be an https URL")
    ca = ""
    if isinstance(cluster.get("certificate-authority-data"), str):
        ca = _b64_pem(source, "clusters[0].cluster.certificate-authority-data",
                      cluster["certificate-authority-data"])  # fmt: skip
    elif isinstance(cluster.get("certificate-authority"), str):
        ca = _read(source, base / cluster["certificate-authority"])
    token = user.get("token") if isinstance(user.get("token"), str) else ""
    if not token and isinstance(user.get("tokenFile"), str):
        token = _read(source, base / user["tokenFile"]).strip()
    cert = user.get("client-certificate")
    key = user.get("client-key")
    return WebhookConfig(
        server, ca,
        str(base / cert) if isinstance(cert, str) else "",
        str(base / key) if isinstance(key, str) else "",
        token or "",
    )  # fmt: skip


def _read(source: str, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialFileError(f"{source}: {path}: cannot read: {exc.strerror}") from None


def _b64_pem(source: str, field: str, value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise CredentialFileError(f"{source}: {field}: not base64 PEM") from None


@dataclass(slots=True)
class _Answer:
    user: UserInfo | None  # None: the webhook said "not authenticated"
    expires: float


class TokenWebhook:
    def __init__(
        self,
        config: WebhookConfig,
        *,
        cache_ttl: float = 120.0,
        timeout: float = 10.0,
        max_concurrency: int = 32,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.cache_ttl = cache_ttl
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self.now = now
        self._cache: dict[bytes, _Answer] = {}
        self._inflight: dict[bytes, asyncio.Future[None]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._ssl: ssl.SSLContext | None = None
        # by HTTP code ("error": no response): kube's apiserver_delegated_authn_request_*
        self.requests: dict[str, int] = {}
        self.observe: Callable[[str, float], None] | None = None

    @staticmethod
    def key(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def authenticate(self, token: str) -> UserInfo | None:
        """The cached answer (``prefetch`` asked); raises ``WebhookRefused`` otherwise."""
        answer = self._cache.get(self.key(token))
        if answer is None or self.now() >= answer.expires:
            raise WebhookRefused("the token webhook gave no answer")
        if answer.user is None:
            raise WebhookRefused("the token webhook did not authenticate the token")
        return answer.user

    async def prefetch(self, token: str) -> None:
        key = self.key(token)
        answer = self._cache.get(key)
        if answer is not None and self.now() < answer.expires:
            return
        running = self._inflight.get(key)
        if running is not None:  # the same token in flight: one review for all of them
            await asyncio.shield(running)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            user = await self._review(token)
        except WebhookRefused as exc:
            log.warning("token webhook %s: %s", self.config.server, exc)
        else:
            if len(self._cache) >= CACHE_SIZE:
                self._cache = {}
            self._cache[key] = _Answer(user, self.now() + self.cache_ttl)
        finally:
            del self._inflight[key]
            future.set_result(None)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            c = self.config
            context = ssl.create_default_context(cadata=c.ca_data or None)
            if c.client_certificate and c.client_key:
                context.load_cert_chain(c.client_certificate, c.client_key)
            self._ssl = context
        return self._ssl

    async def _review(self, token: str) -> UserInfo | None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token}}  # fmt: skip
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        https = self.config.server.startswith("https://")
        start = self.now()
        code = "error"
        try:
            async with (
                self._slots,
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as s,
                s.post(
                    self.config.server,
                    json=body,
                    headers=headers,
                    ssl=self._context() if https else False,
                ) as response,  # fmt: skip
            ):
                code = str(response.status)
                raw = await response.content.read(MAX_RESPONSE_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise WebhookRefused(f"no answer ({type(exc).__name__})") from None
        finally:
            self.requests[code] = self.requests.get(code, 0) + 1
            if self.observe is not None:
                self.observe(code, self.now() - start)
        if code not in {"200", "201"}:
            raise WebhookRefused(f"HTTP {code}")
        return _user_of(raw)


def _user_of(raw: bytes) -> UserInfo | None:
    try:
        doc = json.loads(raw)
        status = doc.get("status") or {}
    except (ValueError, AttributeError):
        raise WebhookRefused("the answer is not a TokenReview") from None
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        return None
    user = status.get("user") or {}
    name = user.get("username") if isinstance(user, dict) else None
    if not isinstance(name, str) or not name:
        raise WebhookRefused("an authenticated TokenReview without a username")
    groups = tuple(g for g in user.get("groups") or () if isinstance(g, str))
    uid_value = user.get("uid")
    uid = uid_value if isinstance(uid_value, str) else ""
    extra_value = user.get("extra")
    extra_doc: dict[str, Any] = extra_value if isinstance(extra_value, dict) else {}
    extra = tuple(
        (k, tuple(v for v in values if isinstance(v, str)))
        for k, values in sorted(extra_doc.items())
        if isinstance(values, list)
    )
    return UserInfo(name, with_authenticated(groups), uid, extra)
