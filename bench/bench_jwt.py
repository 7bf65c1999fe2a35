"""JWT authentication cost per request: uncached RS256 / ES256 verification (signature, claim
rules, CEL mappings) and the cached path, against a token-file look-up measured in the same run.

Run by hand: ``.venv/bin/python bench/bench_jwt.py`` (needs the ``jwt`` extra). No network:
the issuer's JWKS is installed into the key set directly.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import jwt

from gateway.asgi.authconfig import parse_authentication_config
from gateway.asgi.authn import RequestAuthenticator
from gateway.asgi.jwtauth import JWTAuthenticator, JWTAuthenticators
from gateway.asgi.jwtkeys import KeySet
from gateway.flowcontrol.digest import UserInfo
from tests.support.issuer import SigningKey

ISSUER = "https://issuer.example.com/realms/apf"


def authenticator(keys: list[SigningKey], cel: bool) -> JWTAuthenticators:
    groups = (
        {"expression": "claims.realm_access.roles.map(r, 'oidc:' + r)"}
        if cel
        else {"claim": "groups", "prefix": "oidc:"}
    )
    doc = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {"url": ISSUER, "audiences": ["apf"]},
                "claimMappings": {
                    "username": {"claim": "preferred_username", "prefix": "oidc:"},
                    "groups": groups,
                },
            }
        ],
    }
    (config,) = parse_authentication_config(doc)
    keyset = KeySet(config.issuer, now=time.monotonic)
    keyset._install({"keys": [k.jwk() for k in keys]})
    return JWTAuthenticators([JWTAuthenticator(config, keyset)])


def token(key: SigningKey) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": "apf", "exp": now + 3600, "iat": now, "sub": "u",
              "preferred_username": "alice", "groups": ["dev"],
              "realm_access": {"roles": ["dev"]}}  # fmt: skip
    return jwt.encode(claims, key.private, algorithm=key.alg, headers={"kid": key.kid})


def per_call(fn: Callable[[], object], n: int) -> float:
    """Median of 5 rounds of n calls, in microseconds per call."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


def main() -> None:
    rsa, ec = SigningKey.new("r", "RS256"), SigningKey.new("e", "ES256")
    scope_of = {}
    results: dict[str, float] = {}
    tokens = RequestAuthenticator(tokens={"static-token-0123456789": UserInfo("alice")})
    scope = {"headers": [(b"authorization", b"Bearer static-token-0123456789")]}
    results["token file (baseline)"] = per_call(lambda: tokens.authenticate(scope), 100_000)
    for key in (rsa, ec):
        for cel in (False, True):
            auth = authenticator([rsa, ec], cel)
            t = token(key)

            def uncached(auth: JWTAuthenticators = auth, t: str = t) -> object:
                auth._cache.clear()
                return auth.authenticate(t)

            label = f"{key.alg} uncached" + (" + CEL groups" if cel else "")
            results[label] = per_call(uncached, 2000)
        request = RequestAuthenticator(jwt=authenticator([rsa, ec], False))
        scope_of[key.alg] = {"headers": [(b"authorization", f"Bearer {token(key)}".encode())]}
        request.authenticate(scope_of[key.alg])
        results[f"{key.alg} cached (whole authenticate)"] = per_call(
            lambda r=request, s=scope_of[key.alg]: r.authenticate(s), 100_000
        )
    base = results["token file (baseline)"]
    print(f"{'path':40} {'us/request':>10} {'x baseline':>10}")
    for label, us in results.items():
        print(f"{label:40} {us:10.2f} {us / base:10.1f}")


if __name__ == "__main__":
    main()
