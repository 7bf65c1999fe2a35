"""Authentication: turn a request's credentials into a ``UserInfo``, as kube-apiserver does.

Sources are tried in kube-apiserver's order: trusted front-proxy headers (from a connection
whose client certificate verifies against the request-header CA, or from configured source
networks), a client certificate verified against the client CA (user = CN, groups = O), a
bearer token from the static token file, then the JWT authenticators of
``--authentication-config``, then the token webhook, an OpenWhisk API key in HTTP Basic, then
anonymous. Presented but wrong credentials are an error (401), never a fall-through to
anonymous; as in kube-apiserver's union authenticator, a certificate that does not verify
still lets a valid token or key authenticate, and is the 401's reason when none does.
``authenticate`` is synchronous: the tables are loaded up front and swapped on reload; the one
wait a request may need (an issuer's keys not held yet, a webhook's answer not cached) is
``prefetch``, awaited before it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote

from gateway.asgi.clientcert import (
    CertificateRejected,
    ClientCertVerifier,
    common_name,
    organizations,
)
from gateway.asgi.credentials import (
    OpenWhiskKey,
    load_openwhisk_keys,
    load_token_file,
    with_authenticated,
)
from gateway.asgi.refusal import RequestRefused
from gateway.asgi.webhookauth import TokenWebhook, load_webhook_config
from gateway.flowcontrol.digest import ANONYMOUS, UserInfo
from gateway.http.peer import PEER_CERTIFICATES
from gateway.http.types import Scope
from gateway.networks import Network, in_networks, parse_cidrs

if TYPE_CHECKING:
    from gateway.settings.model import AuthenticationSettings

log = logging.getLogger("gateway.authn")
JWT_MODULE = "gateway.asgi.jwtauth"  # loaded by name: it needs the jwt extra


class BearerAuthenticator(Protocol):
    """A bearer-token authenticator that may need the network (the issuer's keys, a webhook)."""

    def authenticate(self, token: str) -> UserInfo | None:
        """The token's user; None: not a token of this authenticator; raises on a bad one."""
        ...

    async def prefetch(self, token: str) -> None: ...


class TokenAuthenticator(BearerAuthenticator, Protocol):
    """The JWT authenticators (``asgi.jwtauth``, loaded by name)."""

    async def aclose(self) -> None:
        """Cancel the issuers' key refreshes running in the background."""
        ...

    # (issuer hash, result, seconds) of an uncached verification, for the metrics
    observe: Callable[[str, str, float], None] | None


class Unauthorized(RequestRefused):
    """Credentials were presented and are not valid (HTTP 401)."""

    code = 401
    reason = "Unauthorized"
    prefix = "Unauthorized: "


@dataclass(frozen=True)
class FrontProxyConfig:
    """Identity headers from a trusted proxy in front of us (Kubernetes ``--requestheader-*``)."""

    allowed_cidrs: tuple[Network, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_header_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    # kube's --requestheader-client-ca-file and --requestheader-allowed-names.
    client_ca: ClientCertVerifier | None = None
    allowed_names: frozenset[str] = frozenset()
    # Either rule configured (a plain attribute: read on every request).
    enabled: bool = field(init=False, repr=False)
    _user: tuple[bytes, ...] = field(init=False, repr=False)
    _group: tuple[bytes, ...] = field(init=False, repr=False)
    _extra: tuple[bytes, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", bool(self.allowed_cidrs) or self.client_ca is not None)
        object.__setattr__(self, "_user", _lower(self.username_headers))
        object.__setattr__(self, "_group", _lower(self.group_headers))
        object.__setattr__(self, "_extra", _lower(self.extra_header_prefixes))

    def trusts(self, client: tuple[str, int] | None) -> bool:
        """The source-network rule (plain-HTTP set-ups)."""
        return client is not None and in_networks(client[0], self.allowed_cidrs)

    def trusts_connection(self, scope: Scope) -> bool:
        """A verified front-proxy certificate (with an allowed CN), or an allowed network."""
        peer = scope.get(PEER_CERTIFICATES)
        if self.client_ca is not None and peer is not None:
            try:
                leaf = self.client_ca.verify(peer)
            except CertificateRejected:
                pass
            else:
                if not self.allowed_names or common_name(leaf) in self.allowed_names:
                    return True
        return bool(self.allowed_cidrs) and self.trusts(scope.get("client"))

    def is_identity_header(self, name: bytes) -> bool:
        """True for headers a client must never be able to pass through to the upstream."""
        return name in self._user or name in self._group or name.startswith(self._extra)


def _lower(names: Iterable[str]) -> tuple[bytes, ...]:
    return tuple(n.lower().encode("latin-1") for n in names)


def _jwt_authenticators(path: str, previous: RequestAuthenticator | None) -> TokenAuthenticator:
    try:
        module = importlib.import_module(JWT_MODULE)
    except ImportError as exc:
        raise ValueError(
            f"authentication.authenticationConfig ({path}) needs the jwt extra "
            f"(pip install 'apf-gateway[jwt]'): {exc}"
        ) from None
    before = previous.jwt if previous is not None else None
    authenticators: TokenAuthenticator = module.authenticators_from_file(path, previous=before)
    return authenticators


def authenticator_from_settings(
    auth: AuthenticationSettings, previous: RequestAuthenticator | None = None
) -> RequestAuthenticator:
    """Reads the credential files (blocking: a reload calls it in its worker thread); raises
    ``CredentialFileError``/``ValueError`` naming the file or setting."""
    rh = auth.request_header
    digest = file_digest(auth.authentication_config) if auth.authentication_config else ""
    authenticator = RequestAuthenticator(
        client_ca=(
            ClientCertVerifier(auth.client_ca_file, "authentication.clientCAFile")
            if auth.client_ca_file
            else None
        ),
        webhook=_webhook(auth),
        jwt=_jwt_authenticators(auth.authentication_config, previous)
        if auth.authentication_config
        else None,
        tokens=load_token_file(auth.token_auth_file) if auth.token_auth_file else None,
        openwhisk_keys=(
            load_openwhisk_keys(auth.openwhisk_keys_file) if auth.openwhisk_keys_file else None
        ),
        front_proxy=FrontProxyConfig(
            allowed_cidrs=parse_cidrs(rh.allowed_cidrs),
            username_headers=rh.username_headers,
            group_headers=rh.group_headers,
            extra_header_prefixes=rh.extra_header_prefixes,
            client_ca=(
                ClientCertVerifier(rh.client_ca_file, "authentication.requestHeader.clientCAFile")
                if rh.client_ca_file
                else None
            ),
            allowed_names=frozenset(rh.allowed_names),
        ),
        anonymous=auth.anonymous,
    )
    authenticator.config_digest = digest
    return authenticator


def _webhook(auth: AuthenticationSettings) -> TokenWebhook | None:
    w = auth.webhook
    if not w.config_file:
        return None
    webhook = TokenWebhook(
        load_webhook_config(w.config_file), cache_ttl=w.cache_ttl, timeout=w.timeout,
        max_concurrency=w.max_concurrency,
    )  # fmt: skip
    return webhook


def file_digest(path: str) -> str:
    """What a reload compares to tell a changed ``--authentication-config`` (unreadable: "")."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


class RequestAuthenticator:
    """The union of the configured sources; ``authenticate`` never returns None."""

    def __init__(
        self,
        *,
        client_ca: ClientCertVerifier | None = None,
        tokens: Mapping[str, UserInfo] | None = None,
        jwt: TokenAuthenticator | None = None,
        webhook: TokenWebhook | None = None,
        openwhisk_keys: Mapping[str, OpenWhiskKey] | None = None,
        front_proxy: FrontProxyConfig | None = None,
        anonymous: bool = True,
    ) -> None:
        self.client_ca = client_ca
        self.tokens = dict(tokens or {})
        self.jwt = jwt
        self.webhook = webhook
        self.config_digest = ""  # of the --authentication-config file this was built from
        # Awaited before ``authenticate`` when set (by the admission middlewares, before they
        # describe the request: ``serve``, the sidecar and the middleware by hand alike); None
        # costs nothing.
        self.prefetch = self._prefetch if jwt is not None or webhook is not None else None
        self.openwhisk_keys = dict(openwhisk_keys or {})
        self.front_proxy = front_proxy or FrontProxyConfig()
        self.anonymous = anonymous

    async def aclose(self) -> None:
        """At shutdown (the lifespan of ``serve`` or of the sidecar's app): the background
        work of the sources, today the JWT issuers' key refreshes, is cancelled and awaited."""
        if self.jwt is not None:
            await self.jwt.aclose()

    async def _prefetch(self, scope: Scope) -> None:
        """kube's union in order: the token file, the JWT authenticators, then the webhook,
        asked only when the ones before it do not accept the token."""
        token = _bearer(scope)
        if not token or token in self.tokens:
            return
        if self.jwt is not None:
            await self.jwt.prefetch(token)
            if self.webhook is None:
                return
            try:
                if self.jwt.authenticate(token) is not None:
                    return
            except Exception:  # refused here; the webhook may still accept it
                pass
        if self.webhook is not None:
            await self.webhook.prefetch(token)

    def authenticate(self, scope: Scope) -> UserInfo:
        fp = self.front_proxy
        if fp.enabled and fp.trusts_connection(scope):
            user = self._from_front_proxy(scope["headers"])
            if user is not None:
                return user
        rejected: CertificateRejected | None = None
        if self.client_ca is not None:
            peer = scope.get(PEER_CERTIFICATES)
            if peer is not None:
                try:
                    leaf = self.client_ca.verify(peer)
                except CertificateRejected as exc:
                    rejected = exc
                else:
                    name = common_name(leaf)
                    if name:  # kube: a certificate without a CN authenticates no one
                        return UserInfo(name, with_authenticated(organizations(leaf)))
        authorization = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        if authorization:
            scheme, _, credential = authorization.partition(b" ")
            scheme = scheme.lower()
            if scheme == b"bearer" and (self.tokens or self.prefetch is not None):
                return self._from_bearer(credential.strip().decode("latin-1"))
            if scheme == b"basic" and self.openwhisk_keys:
                return self._from_basic(credential.strip())
        if rejected is not None:
            raise Unauthorized(str(rejected))
        if self.anonymous:
            return ANONYMOUS
        raise Unauthorized("authentication required")

    def _from_bearer(self, token: str) -> UserInfo:
        """kube's union of token authenticators: the first that accepts wins; none: 401."""
        user = self.tokens.get(token)
        if user is not None:
            return user
        sources: tuple[BearerAuthenticator | None, ...] = (self.jwt, self.webhook)
        for source in sources:
            if source is None:
                continue
            try:
                user = source.authenticate(token)
            except Exception as exc:  # refused, or a bug: never anonymous, never the token
                log.debug("bearer token rejected: %s", exc)
                continue
            if user is not None:
                return user
        raise Unauthorized("invalid bearer token")

    def _from_basic(self, credential: bytes) -> UserInfo:
        try:
            decoded = base64.b64decode(credential, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise Unauthorized("malformed basic credentials") from exc
        uuid, _, key = decoded.partition(":")
        entry = self.openwhisk_keys.get(uuid)
        if entry is None or not hmac.compare_digest(entry.key.encode(), key.encode()):
            raise Unauthorized("invalid API key")
        return entry.user

    def _from_front_proxy(self, headers: list[tuple[bytes, bytes]]) -> UserInfo | None:
        fp = self.front_proxy
        name = ""
        groups: list[str] = []
        extra: dict[str, list[str]] = {}
        for key, value in headers:
            if key in fp._user:
                name = name or value.decode("latin-1").strip()
            elif key in fp._group:
                groups.append(value.decode("latin-1").strip())
            else:
                for prefix in fp._extra:
                    if key.startswith(prefix):
                        extra_key = unquote(key[len(prefix) :].decode("latin-1")).lower()
                        extra.setdefault(extra_key, []).append(value.decode("latin-1").strip())
                        break
        if not name:
            return None
        return UserInfo(
            name,
            with_authenticated(tuple(g for g in groups if g)),
            extra=tuple((k, tuple(v)) for k, v in sorted(extra.items())),
        )


def _bearer(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credential = value.partition(b" ")
            token: str = credential.strip().decode("latin-1") if scheme.lower() == b"bearer" else ""
            return token
    return ""
