"""JWT verification against a real HTTPS issuer on 127.0.0.1: discovery + JWKS, rotation, an
outage; the refresh schedule and the unknown-kid rate limit on a fake clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.asgi.authconfig import parse_authentication_config
from gateway.asgi.authn import RequestAuthenticator, Unauthorized
from gateway.asgi.jwtauth import JWTAuthenticator, JWTAuthenticators, TokenInvalid
from gateway.asgi.jwtkeys import KeySet
from gateway.testing import FakeEventClock
from tests.support.issuer import (
    Issuer,
    SigningKey,
    authentication_configuration,
    running_issuer,
)
from tests.support.wait import async_wait_until


@pytest.fixture(scope="module")
def rsa_key() -> SigningKey:
    return SigningKey.new("k1", "RS256")


@pytest.fixture
def issuer(tmp_path: Path, rsa_key: SigningKey) -> Iterator[Issuer]:
    yield from running_issuer(tmp_path, [rsa_key, SigningKey.new("e1", "ES256")])


def authenticators(
    issuer: Issuer, clock: FakeEventClock | None = None, **mappings: object
) -> JWTAuthenticators:
    (c,) = parse_authentication_config(authentication_configuration(issuer, **mappings))
    keys = KeySet(c.issuer, now=(clock or FakeEventClock()).now)
    return JWTAuthenticators([JWTAuthenticator(c, keys)])


async def check(auth: JWTAuthenticators, token: str) -> object:
    await auth.prefetch(token)
    return auth.authenticate(token)


@pytest.mark.parametrize("alg", ["RS256", "ES256", "PS384", "ES384"])
async def test_a_token_maps_to_user_groups_and_uid(issuer: Issuer, alg: str) -> None:
    key = SigningKey.new(f"k-{alg}", alg)
    issuer.app.keys.append(key)
    auth = authenticators(issuer)
    token = issuer.token(key, preferred_username="alice", groups=["dev", "ops"], sub="u-1")
    user = await check(auth, token)
    assert user is not None
    assert (user.name, user.groups, user.uid) == (  # type: ignore[attr-defined]
        "oidc:alice", ("oidc:dev", "oidc:ops", "system:authenticated"), "u-1",
    )  # fmt: skip


async def test_bad_tokens_are_refused(issuer: Issuer, rsa_key: SigningKey) -> None:
    auth = authenticators(issuer)
    claims = {"preferred_username": "alice", "sub": "u"}
    now = int(time.time())
    forged = SigningKey("k1", "RS256", SigningKey.new("x").private)  # the issuer's kid, not key
    refused = {
        "expired": issuer.token(exp=now - 1, **claims),
        "wrong audience": issuer.token(aud="someone-else", **claims),
        "bad signature": issuer.token(forged, **claims),
        "no exp": issuer.token(exp=None, **claims),
        "nbf beyond the skew": issuer.token(nbf=now + 301 + 5, **claims),
        "no username claim": issuer.token(sub="u"),
        "unknown kid": issuer.token(SigningKey.new("k-unknown"), **claims),
    }
    for why, token in refused.items():
        with pytest.raises(TokenInvalid):
            await check(auth, token)
            pytest.fail(why)
    # nbf within go-oidc's five minutes of skew is fine
    assert await check(auth, issuer.token(nbf=now + 200, **claims)) is not None
    # another issuer's token is not this authenticator's: the next one may take it
    assert await check(auth, issuer.token(iss="https://elsewhere.example", **claims)) is None


async def test_rules_and_cel_mappings(issuer: Issuer) -> None:
    auth = authenticators(
        issuer,
        claimValidationRules=[
            {"claim": "hd", "requiredValue": "example.com"},
            {"expression": "claims.email_verified == true", "message": "unverified"},
        ],
        claimMappings={
            "username": {"expression": "claims.email"},
            "groups": {"expression": "claims.realm_access.roles.map(r, 'kc:' + r)"},
            "extra": [{"key": "example.com/tenant", "valueExpression": "claims.tenant"}],
        },
        userValidationRules=[
            {"expression": "!user.username.startsWith('system:')", "message": "no system users"}
        ],
    )
    base = {"hd": "example.com", "email_verified": True, "realm_access": {"roles": ["admin"]}}
    user = await check(auth, issuer.token(email="a@example.com", tenant="t1", **base))
    assert user is not None
    assert user.name == "a@example.com"  # type: ignore[attr-defined]
    assert user.groups == ("kc:admin", "system:authenticated")  # type: ignore[attr-defined]
    assert user.extra == (("example.com/tenant", ("t1",)),)  # type: ignore[attr-defined]
    for claims in (
        {**base, "hd": "other.com", "email": "a@x", "tenant": "t"},
        {**base, "email_verified": False, "email": "a@x", "tenant": "t"},
        {**base, "email": "system:admin", "tenant": "t"},
        {**base, "email": "a@x"},  # extra's claim missing: CEL fails, the token is refused
    ):
        with pytest.raises(TokenInvalid):
            await check(auth, issuer.token(**claims))


async def test_email_username_needs_email_verified(issuer: Issuer) -> None:
    auth = authenticators(issuer, claimMappings={"username": {"claim": "email", "prefix": ""}})
    assert await check(auth, issuer.token(email="a@x", email_verified=True)) is not None
    assert await check(auth, issuer.token(email="b@x")) is not None  # absent: kube accepts
    with pytest.raises(TokenInvalid, match="email not verified"):
        await check(auth, issuer.token(email="c@x", email_verified=False))


async def test_rotation_schedule_rate_limit_and_outage(issuer: Issuer, rsa_key: SigningKey) -> None:
    clock = FakeEventClock(1000.0)
    auth = authenticators(issuer, clock)
    keys = auth.keysets()[0]
    claims = {"preferred_username": "alice", "sub": "u"}
    token = issuer.token(**claims)
    assert await check(auth, token) is not None
    assert issuer.app.fetches() == 1
    # cached: no fetch, and none before the schedule says so
    clock.run_until(1000.0 + keys.refresh_interval - 1)
    assert await check(auth, token) is not None
    assert issuer.app.fetches() == 1
    # the issuer rotates: a token with the new kid makes one fetch, and is accepted
    new = SigningKey.new("k2", "ES256")
    issuer.app.keys[:] = [new]
    rotated = issuer.token(new, **claims)
    assert await check(auth, rotated) is not None
    assert issuer.app.fetches() == 2
    # the old key is gone: its cached token is verified again, and refused
    with pytest.raises(TokenInvalid):
        await check(auth, token)
    # unknown kids within min_refetch_interval do not fetch again (rate limit)
    stranger = issuer.token(SigningKey.new("k3"), **claims)
    for _ in range(3):
        with pytest.raises(TokenInvalid):
            await check(auth, stranger)
    assert issuer.app.fetches() == 2
    clock.run_until(clock.now() + keys.min_refetch_interval)
    with pytest.raises(TokenInvalid):
        await check(auth, stranger)
    assert issuer.app.fetches() == 3
    # an outage keeps the keys; the scheduled refresh runs in the background, then retries
    issuer.app.outage = True
    clock.run_until(clock.now() + keys.refresh_interval)
    assert await check(auth, rotated) is not None  # served from the keys held, at once
    await async_wait_until(lambda: keys.failures == 1, what="the refresh to fail")
    assert keys.next_refresh == clock.now() + keys.retry_interval
    assert await check(auth, issuer.token(new, **claims)) is not None
    # back: the next due refresh succeeds
    issuer.app.outage = False
    clock.run_until(keys.next_refresh)
    await check(auth, rotated)
    await async_wait_until(lambda: keys.next_refresh > clock.now(), what="a refresh")
    assert keys.next_refresh == clock.now() + keys.refresh_interval


async def test_the_token_never_reaches_the_log_or_the_refusal(
    issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    request = RequestAuthenticator(jwt=authenticators(issuer), anonymous=True)
    token = issuer.token(aud="wrong", preferred_username="alice")
    scope = {"headers": [(b"authorization", f"Bearer {token}".encode())]}
    assert request.prefetch is not None
    await request.prefetch(scope)
    with pytest.raises(Unauthorized) as info:  # presented and refused: never anonymous
        request.authenticate(scope)
    assert caplog.records, "the refusal is logged at debug level"
    signature = token.rsplit(".", 1)[1]
    assert signature not in caplog.text and token.split(".")[1] not in caplog.text
    assert token.split(".")[1] not in str(info.value) and signature not in str(info.value)
