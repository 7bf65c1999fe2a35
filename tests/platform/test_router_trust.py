"""Issue 21: routers never believe identity because of a source address. ``X-Remote-*`` are
read only on requests carrying the internal token, which the front door sends on every
forwarded request; from 127.0.0.1 without it, a request is anonymous (401)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from platform_support import IDENTITY, Platform, action_url
from test_platform_up import Up, auth

from gateway.cli.main import main

CODE = {"kind": "python:3", "code": "def main(a):\n    return {'secret': a.get('key')}\n"}
VICTIM = {"X-Remote-User": "victim", "X-Remote-Extra-Namespace": "victim"}


async def test_identity_headers_without_the_token_are_not_believed(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    """The issue's attack: another namespace's code and parameters read with no key, only
    identity headers, from an address the router used to trust (here loopback)."""
    platform.start_manager()
    r = platform.start_router("r1")
    url = action_url(r, "pay", "victim")
    body = {"exec": CODE, "parameters": [{"key": "key", "value": "s3cr3t"}]}
    # the front door's request: identity with the internal token
    assert (await client.put(url, json=body, headers=VICTIM)).status_code == 200
    assert (await client.get(url, headers=VICTIM)).json()["parameters"][0]["value"] == "s3cr3t"
    async with httpx.AsyncClient(timeout=30) as raw:
        for extra in (
            {},
            {"Authorization": "Bearer " + "x" * 43},
            {"Authorization": platform.token},
        ):
            for method, target in (("GET", url), ("GET", action_url(r, "", "_")[:-1])):
                resp = await raw.request(method, target, headers={**VICTIM, **extra})
                assert resp.status_code == 401, (extra, target, resp.text)
                assert set(resp.json()) == {"error", "code"}
                assert "s3cr3t" not in resp.text
            invoked = await raw.post(url + "?blocking=true", json={}, headers={**VICTIM, **extra})
            assert invoked.status_code == 401
    # the identity that comes with the token is the one believed: namespaces stay apart
    other = await client.get(url, headers=IDENTITY)
    assert other.status_code == 403


def test_trusted_network_is_gone(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["router", "--trusted-network", "10.0.0.0/8"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--trusted-network was removed" in err and "internal token" in err


async def test_up_front_door_authenticates_to_its_routers(tmp_path: Path) -> None:
    """Through ``up``: the front door's forwarded requests work (the token travels), while a
    request straight to a router with identity headers from 127.0.0.1 is anonymous, and a
    client cannot pass platform headers through the front door."""
    up = Up(tmp_path / "state")
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            action = up.base + "/actions/echo"
            put = await http.put(action, json={"exec": CODE}, auth=auth())
            assert put.status_code == 200, put.text
            chosen = "a" * 32
            run = await http.post(
                action + "?blocking=true&result=true",
                json={"key": "v"},
                auth=auth(),
                headers={"X-Apf-Proxied-By": "router-1", "X-Apf-Activation-Id": chosen},
            )
            assert run.status_code == 200 and run.json() == {"secret": "v"}, run.text
            assert run.headers["x-openwhisk-activation-id"] != chosen
            guest = {"X-Remote-User": "guest", "X-Remote-Extra-Namespace": "guest"}
            for router in up.router_urls():
                direct = await http.get(
                    router + "/api/v1/namespaces/guest/actions/echo", headers=guest
                )
                assert direct.status_code == 401, direct.text
                assert "def main" not in direct.text
                # the same with the token is what the front door does
                ok = await http.get(
                    router + "/api/v1/namespaces/guest/actions/echo",
                    headers={**guest, **up.internal},
                )
                assert ok.status_code == 200
    finally:
        assert up.stop() == 0
