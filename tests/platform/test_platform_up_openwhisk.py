"""``apf-gateway up`` speaks OpenWhisk's error shape on ``/api/v1`` even where the front door
answers by itself (401 for a wrong key, 429 from APF), and only the API reaches the routers."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
from platform_support import openwhisk_error
from test_platform_up import TENANTS_CONFIG, free_port, start_up, wait_up

from gateway.cli.up import DEFAULT_API_KEY
from tests.support.wait import async_wait_for

# One seat for every tenant request (server limit 2; 5 of 10 shares), refused when taken.
ONE_SEAT_CONFIG = """\
apiVersion: gateway.apf.dev/v1alpha1
kind: GatewayConfiguration
maxRequestsInflight: 1
maxMutatingRequestsInflight: 1
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: one-seat}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
"""
# every tenant request goes to it: TENANTS_CONFIG's FlowSchema, pointed at this level
ONE_SEAT_CONFIG += "---\n" + TENANTS_CONFIG.split("---\n", 1)[1].replace(
    "platform-tenants", "one-seat"
)
SLOW = "import time\ndef main(a):\n    time.sleep(a.get('sleep', 0))\n    return {}\n"


async def test_up_answers_openwhisk_errors_on_the_api(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "one-seat.yaml"
    config.write_text(ONE_SEAT_CONFIG)
    proc = start_up(port, tmp_path, "--config", str(config))
    try:
        wait_up(proc)
        root = f"http://127.0.0.1:{port}"
        base = f"{root}/api/v1/namespaces/_"
        uuid, _, key = DEFAULT_API_KEY.partition(":")
        async with httpx.AsyncClient(auth=(uuid, key), timeout=30) as client:
            wrong = await client.get(base + "/actions", auth=(uuid, "wrong"))
            assert openwhisk_error(wrong, 401) == "The supplied authentication is invalid"
            async with httpx.AsyncClient(timeout=30) as anonymous:
                missing = await anonymous.get(base + "/actions")
            assert openwhisk_error(missing, 401).startswith("The resource requires authentication")
            namespaces = await client.get(f"{root}/api/v1/namespaces")
            assert namespaces.status_code == 200 and namespaces.json() == ["guest"]
            packages = await client.get(base + "/packages")
            assert openwhisk_error(packages, 501).startswith("Packages are not implemented")

            # outside the API: the front door's Kubernetes Status, and no way to the routers'
            # own endpoints (they trust the front door's loopback address)
            status = (await client.get(f"{root}/metrics", auth=(uuid, "wrong"))).json()
            assert status["kind"] == "Status" and status["code"] == 401
            state = await client.get(f"{root}/_platform/v1/state")
            assert state.status_code == 404 and state.json()["kind"] == "Status"

            put = await client.put(
                base + "/actions/slow", json={"exec": {"kind": "python:3", "code": SLOW}}
            )
            assert put.status_code == 200, put.text

            def hold() -> asyncio.Future[httpx.Response]:
                invoke = client.post(base + "/actions/slow?blocking=true", json={"sleep": 3})
                return asyncio.ensure_future(invoke)

            holder = hold()

            async def refused_while_held() -> httpx.Response | None:
                nonlocal holder
                probe = await client.get(base + "/actions")
                if probe.status_code == 429:
                    return probe
                if holder.done():  # it arrived while a probe held the seat: try again
                    assert holder.result().status_code == 429, holder.result().text
                    holder = hold()
                return None

            # the invoke holds the one seat: the next request is refused
            refused = await async_wait_for(
                refused_while_held, 20, "a request refused while the invoke holds the seat", 0.05
            )
            assert openwhisk_error(refused, 429) == (
                "Too many concurrent requests in flight (count: 1, allowed: 1)."
            )
            assert int(refused.headers["retry-after"]) >= 1
            assert (await holder).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, out
