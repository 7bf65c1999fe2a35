"""JWT authenticators of kube's ``AuthenticationConfiguration`` (the ``jwt`` extra).

Semantics follow kube-apiserver's ``plugin/pkg/authenticator/token/oidc``: the token's ``iss``
picks the authenticator (a token of another issuer is left to the next authenticator); the
signature is checked against the issuer's JWKS with kube's algorithms; ``exp`` is strict and
``nbf`` has go-oidc's 5 minutes of clock skew (``iat`` is not checked, as go-oidc); then the
claim validation rules, the claim mappings and the user validation rules. A verified token's
user is cached until its ``exp``, dropped when the issuer's keys change.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cel
from jwt.exceptions import PyJWTError

from gateway.asgi.authconfig import (
    ClaimOrExpression,
    JWTAuthenticatorConfig,
    load_authentication_config,
)
from gateway.asgi.credentials import with_authenticated
from gateway.asgi.jws import ALGORITHM, ALGORITHMS, ParsedToken, parse_token, usable
from gateway.asgi.jwtkeys import KeySet
from gateway.flowcontrol.digest import UserInfo

log = logging.getLogger("gateway.authn.jwt")
NBF_SKEW = 300.0  # go-oidc's allowedClockSkew
CACHE_SIZE = 10_000


class TokenInvalid(Exception):
    """A token of a configured issuer that does not authenticate; the reason names no token
    content (it goes to a debug log line, never to the client)."""


def compile_cel(expression: str) -> Any:
    try:
        return cel.compile(expression)
    except Exception as exc:  # the binding raises ValueError, but a Rust panic may surface too
        raise ValueError(str(exc).splitlines()[0]) from None


def _check_cel(expression: str) -> None:
    compile_cel(expression)


@dataclass(frozen=True, slots=True)
class _Cached:
    user: UserInfo
    expires: float
    keys: KeySet
    generation: int


class JWTAuthenticator:
    """One ``jwt`` entry: verifies tokens of its issuer with its key set."""

    def __init__(self, config: JWTAuthenticatorConfig, keys: KeySet) -> None:
        self.config = config
        self.keys = keys
        c = config
        self._claim_rules = [
            (r.claim, r.required_value, compile_cel(r.expression) if r.expression else None,
             r.message or f"expression '{r.expression}' resolved to false")
            for r in c.claim_validation_rules
        ]  # fmt: skip
        self._user_rules = [
            (
                compile_cel(r.expression),
                r.message or f"expression '{r.expression}' resolved to false",
            )
            for r in c.user_validation_rules
        ]
        self._audiences = frozenset(c.issuer.audiences)
        self._extra = [(e.key, compile_cel(e.value_expression)) for e in c.extra]
        self._programs: dict[str, Any] = {}
        for m in (c.username, c.groups, c.uid):
            if m is not None and m.expression:
                self._programs[m.expression] = compile_cel(m.expression)

    def verify(self, token: ParsedToken, now: float) -> tuple[UserInfo, float]:
        """The token's user and its ``exp``; raises ``TokenInvalid``."""
        alg = token.header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            raise TokenInvalid(f"algorithm {alg!r} is not accepted")
        if "crit" in token.header:
            raise TokenInvalid("critical header parameters are not supported")
        kid = token.header.get("kid")
        candidates = [k for k in self.keys.find(kid if isinstance(kid, str) else None)
                      if usable(k, alg)]  # fmt: skip
        if not candidates:
            raise TokenInvalid("no key of the issuer matches the token's kid and alg")
        algorithm = ALGORITHM[alg]
        for key in candidates:
            try:
                if algorithm.verify(token.signing_input, key.jwk.key, token.signature):
                    break
            except (PyJWTError, ValueError, TypeError):
                continue
        else:
            raise TokenInvalid("signature does not verify with the issuer's keys")
        claims = token.claims
        aud = claims.get("aud")
        auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(a in self._audiences for a in auds if isinstance(a, str)):
            raise TokenInvalid("no audience of the token is configured")
        exp = self._check_times(claims, now)
        self._validate_claims(claims)
        return self._user(claims), exp

    @staticmethod
    def _check_times(claims: Mapping[str, Any], now: float) -> float:
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenInvalid("exp is missing or not a number")
        if now > exp:
            raise TokenInvalid("token is expired")
        nbf = claims.get("nbf")
        if nbf is not None:
            if not isinstance(nbf, int | float) or isinstance(nbf, bool):
                raise TokenInvalid("nbf is not a number")
            if now + NBF_SKEW < nbf:
                raise TokenInvalid("token is not valid yet (nbf)")
        return float(exp)

    def _validate_claims(self, claims: dict[str, Any]) -> None:
        for claim, required, program, message in self._claim_rules:
            if program is None:
                if claims.get(claim) != required:
                    raise TokenInvalid(f"claim {claim!r} does not have the required value")
            elif self._run(program, {"claims": claims}, "claimValidationRules") is not True:
                raise TokenInvalid(message)

    def _user(self, claims: dict[str, Any]) -> UserInfo:
        c = self.config
        name = self._mapped(c.username, claims, "username")
        if not isinstance(name, str) or not name:
            raise TokenInvalid("the username claim mapping gives no string")
        if c.username.claim == "email" and claims.get("email_verified", True) is not True:
            raise TokenInvalid("email not verified")
        name = (c.username.prefix or "") + name
        groups: tuple[str, ...] = ()
        if c.groups is not None:
            groups = self._strings(
                self._mapped(c.groups, claims, "groups", optional=True), "groups"
            )
            groups = tuple((c.groups.prefix or "") + g for g in groups)
        uid = ""
        if c.uid is not None:
            value = self._mapped(c.uid, claims, "uid", optional=True)
            if value is not None and not isinstance(value, str):
                raise TokenInvalid("the uid claim mapping gives no string")
            uid = value or ""
        extra: list[tuple[str, tuple[str, ...]]] = []
        for key, program in self._extra:
            values = self._strings(self._run(program, {"claims": claims}, "extra"), "extra")
            if values:
                extra.append((key, values))
        user = UserInfo(name, with_authenticated(groups), uid, tuple(sorted(extra)))
        if self._user_rules:
            view = {"user": {"username": user.name, "uid": user.uid, "groups": list(groups),
                             "extra": {k: list(v) for k, v in user.extra}}}  # fmt: skip
            for program, message in self._user_rules:
                if self._run(program, view, "userValidationRules") is not True:
                    raise TokenInvalid(message)
        return user

    def _mapped(
        self, m: ClaimOrExpression, claims: dict[str, Any], what: str, *, optional: bool = False
    ) -> Any:
        if m.expression:
            return self._run(self._programs[m.expression], {"claims": claims}, what)
        if m.claim not in claims and not optional:
            raise TokenInvalid(f"claim {m.claim!r} is missing")
        return claims.get(m.claim)

    @staticmethod
    def _strings(value: Any, what: str) -> tuple[str, ...]:
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(v for v in value if v)
        raise TokenInvalid(f"the {what} mapping gives neither a string nor a list of strings")

    @staticmethod
    def _run(program: Any, context: dict[str, Any], what: str) -> Any:
        try:
            return program.execute(context)
        except Exception as exc:  # CEL's errors (no such key, type errors) all mean "invalid"
            raise TokenInvalid(f"{what}: CEL evaluation failed: {type(exc).__name__}") from None


class JWTAuthenticators:
    """All ``jwt`` entries of one file, by issuer URL, and the verified-token cache."""

    def __init__(
        self, authenticators: list[JWTAuthenticator], *, wall: Callable[[], float] = time.time
    ) -> None:
        self.by_issuer = {a.config.issuer.url: a for a in authenticators}
        self.wall = wall
        # (issuer hash, "success"/"failure", seconds) of each uncached verification: kube's
        # apiserver_authentication_jwt_authenticator_latency_seconds
        self.observe: Callable[[str, str, float], None] | None = None
        self._issuer_hash = {
            url: "sha256:" + hashlib.sha256(url.encode()).hexdigest() for url in self.by_issuer
        }
        self._cache: dict[str, _Cached] = {}
        # The last token refused and why: a request asks twice when a webhook follows (its
        # prefetch, then authenticate), and a refusal is verified and counted once.
        self._last_refused: tuple[str, TokenInvalid] | None = None

    def keysets(self) -> list[KeySet]:
        return [a.keys for a in self.by_issuer.values()]

    async def aclose(self) -> None:
        """Shutdown: stop the key refreshes running in the background."""
        for keys in self.keysets():
            await keys.aclose()

    def _cached(self, token: str) -> UserInfo | None:
        hit = self._cache.get(token)
        if hit is None:
            return None
        if hit.generation != hit.keys.generation or self.wall() > hit.expires:
            del self._cache[token]
            return None
        return hit.user

    def authenticator_for(self, token: str) -> tuple[JWTAuthenticator, ParsedToken] | None:
        """The authenticator of the token's issuer and the parsed token; None: not ours."""
        parsed = parse_token(token)
        if parsed is None:
            return None
        iss = parsed.claims.get("iss")
        found = self.by_issuer.get(iss) if isinstance(iss, str) else None
        return None if found is None else (found, parsed)

    async def prefetch(self, token: str) -> None:
        """Before ``authenticate`` (on the loop): the only place a request may wait, and only
        for an issuer's keys it does not hold yet."""
        self._last_refused = None  # the memo serves this request's authenticate only
        hit = self._cache.get(token)
        if hit is not None:
            hit.keys.refresh_if_due()
            return
        found = self.authenticator_for(token)
        if found is None:
            return
        authenticator, parsed = found
        keys = authenticator.keys
        kid = parsed.header.get("kid")
        if not keys.find(kid if isinstance(kid, str) else None):
            await keys.refresh_for_unknown_kid()
        else:
            keys.refresh_if_due()

    def authenticate(self, token: str) -> UserInfo | None:
        """The token's user; None when no issuer here is the token's; raises ``TokenInvalid``."""
        user = self._cached(token)
        if user is not None:
            return user
        refused = self._last_refused
        if refused is not None and refused[0] == token:
            raise refused[1]
        found = self.authenticator_for(token)
        if found is None:
            return None
        authenticator, parsed = found
        start = time.perf_counter()
        result = "failure"
        try:
            user, exp = authenticator.verify(parsed, self.wall())
            result = "success"
        except TokenInvalid as exc:
            self._last_refused = (token, exc)
            raise
        finally:
            if self.observe is not None:
                issuer = self._issuer_hash[authenticator.config.issuer.url]
                self.observe(issuer, result, time.perf_counter() - start)
        if len(self._cache) >= CACHE_SIZE:
            self._cache = {}
        keys = authenticator.keys
        self._cache[token] = _Cached(user, exp, keys, keys.generation)
        return user


def authenticators_from_file(
    path: str | Path,
    *,
    previous: JWTAuthenticators | None = None,
    now: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> JWTAuthenticators:
    """Reads and validates the file (blocking: a reload calls it in its worker thread). An
    issuer whose keys come from where they came before keeps its key set (and its keys)."""
    configs = load_authentication_config(path, _check_cel)
    old = {k.issuer.url: k for k in previous.keysets()} if previous is not None else {}
    out = []
    for config in configs:
        keys = old.get(config.issuer.url)
        if keys is None or not keys.same_source(config.issuer):
            keys = KeySet(config.issuer, now=now)
        out.append(JWTAuthenticator(config, keys))
    return JWTAuthenticators(out, wall=wall)
