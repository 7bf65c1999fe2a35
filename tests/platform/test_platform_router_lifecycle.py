"""Router restarts: graceful stop loses no activation record; a restarted router (same id)
gets its containers back from the manager."""

from __future__ import annotations

import signal

import httpx
from platform_support import SLOW, Platform, annotation, invoke, put_action

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


async def test_restarted_router_gets_its_containers_back(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "act", SLOW)
    cid = annotation((await invoke(client, r, "act", {"sleep": 0})).json(), "container")
    r.stop(signal.SIGKILL)  # no goodbye: the manager still lists the container as r1's
    again = platform.start_router("r1")
    resp = await invoke(client, again, "act", {"sleep": 0})
    assert resp.status_code == 200, resp.text
    assert annotation(resp.json(), "container") == cid
