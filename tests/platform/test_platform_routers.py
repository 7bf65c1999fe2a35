"""Two routers: disjoint ownership, the proxy path, and reassignment after a router dies."""

from __future__ import annotations

import asyncio
import signal

import httpx
from platform_support import (
    SLOW,
    Platform,
    annotation,
    invoke,
    manager_containers,
    manager_containers_until,
    put_action,
    recorded,
)


async def held(client: httpx.AsyncClient, url: str, auth: dict[str, str]) -> set[str]:
    state = (await client.get(url + "/_platform/v1/state", headers=auth)).json()
    return {c["id"] for c in state["containers"]}


async def test_disjoint_ownership_and_proxy(platform: Platform, client: httpx.AsyncClient) -> None:
    platform.start_manager()
    r1 = platform.start_router("r1")
    r2 = platform.start_router("r2")
    await put_action(client, r1, "one", SLOW)
    first = await invoke(client, r1, "one", {"sleep": 0})
    owner = annotation(first.json(), "container")
    # r2 owns nothing for "one": the manager names r1 and r2 forwards one hop
    via_r2 = await invoke(client, r2, "one", {"sleep": 0})
    assert via_r2.status_code == 200, via_r2.text
    assert via_r2.headers["x-apf-proxied-by"] == "r2"
    assert annotation(via_r2.json(), "container") == owner
    assert await held(client, r2.url, platform.auth) == set()
    # a non-blocking invoke is forwarded too, under the id r2 answered with
    nb = await invoke(client, r2, "one", {"sleep": 0}, "blocking=false")
    assert nb.status_code == 202
    aid = nb.json()["activationId"]
    got = await recorded(client, f"{r1.url}/api/v1/namespaces/_/activations/{aid}")
    assert got.status_code == 200 and annotation(got.json(), "container") == owner

    # load through both routers: every container has exactly one owner
    await put_action(client, r1, "busy", SLOW)
    calls = [invoke(client, r, "busy", {"sleep": 0.3}) for r in (r1, r2) for _ in range(4)]
    results = await asyncio.gather(*calls)
    assert all(x.status_code == 200 for x in results)
    h1, h2 = await held(client, r1.url, platform.auth), await held(client, r2.url, platform.auth)
    assert not h1 & h2
    owners = {c["id"]: c["owner"] for c in await manager_containers(client, platform)}
    assert all(owners[c] == "r1" for c in h1) and all(owners[c] == "r2" for c in h2)
    assert h2, "r2 got containers of its own under load"


async def test_dead_router_containers_are_reassigned(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager("--lease-seconds", "1")
    r1 = platform.start_router("r1")
    r2 = platform.start_router("r2")
    await put_action(client, r1, "act", SLOW, limits={"timeout": 500})
    cid = annotation((await invoke(client, r1, "act", {"sleep": 0})).json(), "container")
    r1.stop(signal.SIGKILL)
    # lease (1 s) expires, then the container is quarantined for the action timeout (0.5 s)
    # plus the margin (1 s), after which r2 is given the same warm container
    await manager_containers_until(
        client, platform, lambda found: found[cid]["state"] == "unassigned", f"{cid} released"
    )
    resp = await invoke(client, r2, "act", {"sleep": 0})
    assert resp.status_code == 200, resp.text
    assert annotation(resp.json(), "container") == cid
    assert annotation(resp.json(), "initTime") is not None  # r2 (re)initialises it once
    assert cid in await held(client, r2.url, platform.auth)
