"""The C invariant under parallel load, containers created as needed, quota and eviction."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import httpx
import pytest
from platform_support import (
    SLOW,
    Platform,
    annotation,
    invoke,
    manager_containers,
    put_action,
    recorded,
    scrape,
)


def max_overlap(records: list[dict[str, Any]]) -> dict[str, int]:
    """Per container, the most activations whose [start, end) spans overlap."""
    events: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for record in records:
        cid = annotation(record, "container")
        events[cid] += [(record["start"], 1), (record["end"], -1)]
    peaks = {}
    for cid, items in events.items():
        level = peak = 0
        for _, delta in sorted(items):  # an end sorts before a start at the same ms
            level += delta
            peak = max(peak, level)
        peaks[cid] = peak
    return peaks


@pytest.mark.parametrize("c", [1, 3])
async def test_never_more_than_c_per_container(
    platform: Platform, client: httpx.AsyncClient, c: int
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "slow", SLOW, limits={"concurrency": c, "instances": 4})
    n = 16
    responses = await asyncio.gather(*(invoke(client, r, "slow", {"sleep": 0.4}) for _ in range(n)))
    assert all(resp.status_code == 200 for resp in responses), [x.text for x in responses]
    records = [resp.json() for resp in responses]
    peaks = max_overlap(records)
    assert max(peaks.values()) <= c, peaks
    assert 1 < len(peaks) <= 4  # more containers were created, within limits.instances
    if c > 1:
        assert max(peaks.values()) > 1  # and C > 1 is actually used


async def test_quota_429_when_nothing_evictable(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager("--quota", "2")
    r = platform.start_router("r1", "--buffer-seconds", "2")
    await put_action(client, r, "keep", SLOW, eviction={"safe": "OnUpgrade"})
    await asyncio.gather(*(invoke(client, r, "keep", {"sleep": 0.3}) for _ in range(2)))
    assert len(await manager_containers(client, platform)) == 2
    await put_action(client, r, "newcomer", SLOW)
    resp = await invoke(client, r, "newcomer", {"sleep": 0})
    assert resp.status_code == 429
    assert "quota of 2 containers" in resp.json()["error"]
    assert resp.headers["retry-after"].isdigit()
    # non-blocking: accepted, and the activation records the throttling (as OpenWhisk's
    # asynchronous throttles do)
    nb = await invoke(client, r, "newcomer", {"sleep": 0}, "blocking=false")
    assert nb.status_code == 202
    url = f"{r.url}/api/v1/namespaces/_/activations/{nb.json()['activationId']}"
    got = await recorded(client, url)
    assert got.json()["response"]["result"] == {"error": "Too many concurrent requests in flight."}
    assert platform.manager is not None
    seen = await scrape(client, platform.manager.url)
    assert seen['apf_manager_quota_rejections_total{limit="quota",namespace="guest"}'] >= 2
    mine = await scrape(client, r.url)
    assert (
        mine['apf_router_invocations_total{action="newcomer",namespace="guest",status="throttled"}']
        == 2
    )


async def test_quota_evicts_an_idle_container_when_allowed(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager("--quota", "1")
    r = platform.start_router("r1")
    await put_action(client, r, "old", SLOW, eviction={"safe": "Always"})
    first = await invoke(client, r, "old", {"sleep": 0})
    victim = annotation(first.json(), "container")
    await put_action(client, r, "new", SLOW)
    resp = await invoke(client, r, "new", {"sleep": 0})
    assert resp.status_code == 200, resp.text
    ids = {x["id"] for x in await manager_containers(client, platform)}
    assert victim not in ids and annotation(resp.json(), "container") in ids
    assert platform.manager is not None
    seen = await scrape(client, platform.manager.url)
    space = 'outcome="stopped",policy="Always",reason="space"'
    assert seen[f"apf_manager_evictions_total{{{space}}}"] == 1
