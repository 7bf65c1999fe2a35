"""``apf-gateway serve --authentication-config``: a real serve process, a real HTTPS issuer and a
real upstream. A JWT reaches the upstream as the mapped user and groups and is classified by
them; bad tokens get 401; a key rotation and a config change apply without a restart."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.frontdoor.conftest import ServerThread, start_gateway
from tests.platform.platform_support import scrape
from tests.support.issuer import (
    REALM_ROLES,
    Issuer,
    SigningKey,
    authentication_configuration,
    running_issuer,
)
from tests.support.ports import free_port
from tests.support.wait import async_wait_until, wait_until

APF = """
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: oidc-admins}
spec:
  matchingPrecedence: 500
  priorityLevelConfiguration: {name: workload-high}
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects:
    - {kind: Group, group: {name: "oidc:admins"}}
    nonResourceRules:
    - {verbs: ["*"], nonResourceURLs: ["*"]}
"""


def authentication_config(issuer: Issuer, prefix: str = "oidc:") -> str:
    """Keycloak-shaped claims: preferred_username, realm roles as groups."""
    return yaml.safe_dump(authentication_configuration(issuer, prefix=prefix, groups=REALM_ROLES))


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[Issuer]:
    yield from running_issuer(tmp_path, [SigningKey.new("k1", "RS256")])


@pytest.fixture
def serve(
    tmp_path: Path, issuer: Issuer, upstream: ServerThread
) -> Iterator[tuple[str, Path, Path]]:
    authn = tmp_path / "authn.yaml"
    authn.write_text(authentication_config(issuer))
    apf = tmp_path / "apf.yaml"
    apf.write_text(APF)
    log = tmp_path / "serve.log"
    port = free_port()
    args = [
        sys.executable, "-m", "gateway", "serve", "--listen", f"127.0.0.1:{port}",
        "--upstream", upstream.url, "--authentication-config", str(authn), "--config", str(apf),
        "--config-poll-interval", "100ms",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(url + "/readyz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, 60, "serve to be ready")  # a cold start on a busy machine
        yield url, authn, log
    finally:
        proc.terminate()
        proc.wait(15)


def identity(r: httpx.Response) -> tuple[str, list[str]]:
    assert r.status_code == 200, r.text
    headers: dict[str, list[str]] = {}
    for k, v in r.json()["headers"]:
        headers.setdefault(k.lower(), []).append(v)
    return headers["x-remote-user"][0], headers["x-remote-group"]


async def test_a_jwt_reaches_the_upstream_as_its_mapped_user(
    serve: tuple[str, Path, Path], issuer: Issuer
) -> None:
    url, authn, log = serve
    claims = {"preferred_username": "alice", "sub": "u-1", "realm_access": {"roles": ["admins"]}}
    token = issuer.token(**claims)
    async with httpx.AsyncClient(base_url=url) as client:
        r = await client.get("/echo", headers={"Authorization": f"Bearer {token}"})
        assert identity(r) == ("oidc:alice", ["oidc:admins", "system:authenticated"])
        fs_uid = r.headers["x-kubernetes-pf-flowschema-uid"]
        metrics = await scrape(client, url)
        key = (
            "apiserver_flowcontrol_dispatched_requests_total"
            '{flow_schema="oidc-admins",priority_level="workload-high"}'
        )
        assert metrics.get(key) == 1, sorted(k for k in metrics if "dispatched" in k)
        # no credentials: anonymous, another flow schema
        anonymous = await client.get("/echo")
        assert anonymous.headers["x-kubernetes-pf-flowschema-uid"] != fs_uid

        now = int(time.time())
        forged = SigningKey("k1", "RS256", SigningKey.new("x").private)
        bad = {
            "expired": issuer.token(exp=now - 10, **claims),
            "wrong audience": issuer.token(aud="other", **claims),
            "wrong issuer": issuer.token(iss="https://127.0.0.1:1", **claims),
            "bad signature": issuer.token(forged, **claims),
            "not a JWT": "not-a-jwt",
        }
        for why, t in bad.items():
            r = await client.get("/echo", headers={"Authorization": f"Bearer {t}"})
            assert r.status_code == 401, why
            assert r.json()["reason"] == "Unauthorized", why
            assert t.split(".")[-1] not in r.text, why

        m = await scrape(client, url)
        assert m['authentication_attempts{result="failure"}'] == 5
        # kube's authentication_duration_seconds{result}: one observation per attempt
        assert m['authentication_duration_seconds_count{result="failure"}'] == 5
        assert (
            m['authentication_duration_seconds_count{result="success"}']
            == m['authentication_attempts{result="success"}']
        )
        assert m['authentication_duration_seconds_bucket{le="16.384",result="failure"}'] == 5
        issuer_hash = "sha256:" + hashlib.sha256(issuer.url.encode()).hexdigest()
        latency = "apiserver_authentication_jwt_authenticator_latency_seconds_count"
        assert m[f'{latency}{{jwt_issuer_hash="{issuer_hash}",result="success"}}'] == 1
        # expired, wrong audience, bad signature; the others are no JWT of this issuer
        assert m[f'{latency}{{jwt_issuer_hash="{issuer_hash}",result="failure"}}'] == 3

        # the issuer rotates its key: picked up without a restart, once the unknown-kid fetch
        # is allowed again (at most one every min_refetch_interval, 10 s, since the first)
        new = SigningKey.new("k2", "ES256")
        issuer.app.keys[:] = [new]
        rotated = {"Authorization": f"Bearer {issuer.token(new, **claims)}"}

        async def accepted() -> bool:
            return (await client.get("/echo", headers=rotated)).status_code == 200

        await async_wait_until(accepted, what="the rotated key to be fetched")
        assert identity(await client.get("/echo", headers=rotated))[0] == "oidc:alice"

        # the configuration changes (a new prefix): reloaded; a bad version keeps the last good
        authn.write_text(authentication_config(issuer, prefix="kc:"))
        token2 = issuer.token(new, **claims)

        async def user() -> str:
            r = await client.get("/echo", headers={"Authorization": f"Bearer {token2}"})
            return identity(r)[0]

        await async_wait_until(lambda: user_is(user, "kc:alice"), what="the reload")
        authn.write_text(authentication_config(issuer).replace("audiences", "audience"))
        reloads = "apiserver_authentication_config_controller_automatic_reloads_total{"

        async def refused() -> bool:
            m = await scrape(client, url)
            failed = [v for k, v in m.items() if k.startswith(reloads) and 'status="failure"' in k]
            return failed == [1]

        await async_wait_until(refused, what="the bad version to be refused")
        assert await user() == "kc:alice"
        m = await scrape(client, url)
        succeeded = [v for k, v in m.items() if k.startswith(reloads) and 'status="success"' in k]
        assert succeeded == [1]
    for part in (token.split(".")[1], token.split(".")[2]):
        assert part not in log.read_text()


async def user_is(get: object, expected: str) -> bool:
    return await get() == expected  # type: ignore[operator]


async def test_two_users_of_one_issuer_are_two_flows(
    tmp_path: Path, issuer: Issuer, upstream: ServerThread, gateways: list[ServerThread]
) -> None:
    authn = tmp_path / "authn.yaml"
    authn.write_text(authentication_config(issuer))
    apf = tmp_path / "apf.yaml"
    apf.write_text(APF)
    gw = start_gateway(
        {
            "upstreams": [{"url": upstream.url}],
            "authentication": {"authenticationConfig": str(authn)},
        },
        [str(apf)],
    )
    gateways.append(gw)
    roles = {"realm_access": {"roles": ["admins"]}}
    tokens = [issuer.token(preferred_username=n, sub=n, **roles) for n in ("alice", "bob")]
    async with httpx.AsyncClient(base_url=gw.url) as client:
        for t in tokens:  # through the front door: the issuer's keys are fetched here
            r = await client.get("/echo", headers={"Authorization": f"Bearer {t}"})
            assert r.status_code == 200

    def classify(token: str) -> tuple[str, str]:
        scope = {"type": "http", "method": "GET", "path": "/echo", "query_string": b"",
                 "headers": [(b"authorization", f"Bearer {token}".encode())]}  # fmt: skip
        digest = gw.app.describer.describe(scope)
        c = gw.app.controller.classify(digest)
        return c.flow_schema, c.distinguisher

    assert [gw.call(lambda t=t: classify(t)) for t in tokens] == [
        ("oidc-admins", "oidc:alice"),
        ("oidc-admins", "oidc:bob"),
    ]
