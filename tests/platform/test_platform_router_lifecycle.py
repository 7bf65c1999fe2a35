"""Router restarts: graceful stop loses no activation record; a router restarted under the
same id after a crash gets its predecessor's containers only once they cannot be busy."""

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
    wait_running,
)

from gateway.store import open_store


async def test_graceful_stop_records_every_activation(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "slow", SLOW, limits={"concurrency": 5})
    await invoke(client, r, "slow", {"sleep": 0})
    ids = []
    for _ in range(5):
        resp = await invoke(client, r, "slow", {"sleep": 0.5}, "blocking=false")
        assert resp.status_code == 202
        ids.append(resp.json()["activationId"])
    assert r.stop(signal.SIGTERM) == 0  # while the five are still running
    store = open_store(platform.store)
    await store.open()
    try:
        for aid in ids:
            record = await store.get_activation("guest", aid)
            assert record is not None, aid
            assert record["response"]["result"] == {"slept": 0.5}
    finally:
        await store.close()


async def test_restarted_router_waits_out_its_predecessors_containers(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    """A router killed mid-activation and started again under its id (as `up` does) must not
    send a second /run into a container still running the dead process's activation (C = 1):
    the manager quarantines the predecessor's containers for the action's timeout; after it
    they are warm and reusable again."""
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "act", SLOW, limits={"timeout": 2000})
    cid = annotation((await invoke(client, r, "act", {"sleep": 0})).json(), "container")
    busy = asyncio.ensure_future(invoke(client, r, "act", {"sleep": 1.5}))
    assert await wait_running(client, r.url, platform.auth, 1) == {cid: 1}
    r.stop(signal.SIGKILL)  # no goodbye: the manager still lists the container as r1's
    (failed,) = await asyncio.gather(busy, return_exceptions=True)
    assert isinstance(failed, httpx.HTTPError)  # the caller of the dead router sees it
    again = platform.start_router("r1")
    resp = await invoke(client, again, "act", {"sleep": 0})
    assert resp.status_code == 200, resp.text
    assert annotation(resp.json(), "container") != cid
    states = {c["id"]: c["state"] for c in await manager_containers(client, platform)}
    assert states[cid] == "quarantined"
    await manager_containers_until(  # the timeout (2 s) and the margin (1 s)
        client, platform, lambda found: found[cid]["state"] == "unassigned", f"{cid} released"
    )
