"""Issue 21 follow-up: what a router keeps per action is bounded (real manager and router
processes, a real SQLite store).

The action cache holds at most ``--action-cache-entries`` documents of ``--action-cache-bytes``
(encoded) in all, the least recently invoked going first and counted; an evicted action is
read from the store again at its next invoke. An action's metric series go when it is deleted
(through this router, or seen gone through another) and beyond ``--action-cache-entries``
actions, so a create/invoke/delete loop does not grow the scrape.
"""

from __future__ import annotations

import httpx
from platform_support import (
    Platform,
    Proc,
    action_url,
    invoke,
    manager_containers,
    put_action,
    scrape,
)

from tests.support.wait import async_wait_until

HOUR = "3600"  # an action cache time no test outlasts: what the router serves is its cache's
PAD = 40_000  # bytes of comment in the padded actions' code


def code(value: str, pad: int = 0) -> str:
    return f"# {'x' * pad}\ndef main(args):\n    return {{'v': {value!r}}}\n"


async def result(client: httpx.AsyncClient, router: Proc, name: str) -> object:
    resp = await invoke(client, router, name)
    assert resp.status_code == 200, resp.text
    return resp.json()["response"]["result"]["v"]


def evictions(samples: dict[str, float], limit: str) -> float:
    return samples[f'apf_router_action_cache_evictions_total{{limit="{limit}"}}']


def actions_with_series(samples: dict[str, float], prefix: str = "apf_router_") -> set[str]:
    """The action names the per-action series (named ``prefix...``) of the scrape carry."""
    found = set()
    for key in samples:
        if key.startswith(prefix) and 'action="' in key:
            found.add(key.split('action="', 1)[1].split('"', 1)[0])
    return found


async def test_the_least_recently_invoked_action_is_evicted_and_read_again_from_the_store(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r1 = platform.start_router("r1", "--action-cache-entries", "2", "--action-cache-seconds", HOUR)
    r2 = platform.start_router("r2")  # updates the actions behind r1's back
    for name in "abc":
        await put_action(client, r1, name, code(f"{name}1"))
    assert [await result(client, r1, name) for name in "aba"] == ["a1", "b1", "a1"]
    assert await result(client, r1, "c") == "c1"  # b is the least recently invoked: it goes
    samples = await scrape(client, r1.url)
    assert evictions(samples, "entries") == 1 and evictions(samples, "bytes") == 0
    assert samples["apf_router_action_cache_entries{}"] == 2

    for name in "ab":
        await put_action(client, r2, name, code(f"{name}2"))
    # a is still cached (the hour is not over): r1 serves what it read; b was evicted: r1
    # reads it from the store again, and gets the update
    assert await result(client, r1, "a") == "a1"
    assert await result(client, r1, "b") == "b2"
    samples = await scrape(client, r1.url)
    assert evictions(samples, "entries") == 2  # c, the least recently invoked, made room
    # counters are kept for as many actions as documents, the least recently run going
    # first (c's container, still warm here, is in apf_router_containers until it idles out)
    assert actions_with_series(samples, "apf_router_invocations_total") == {"a", "b"}
    assert actions_with_series(samples, "apf_router_cold_starts_total") == {"a", "b"}
    assert actions_with_series(samples, "apf_router_containers") == {"a", "b", "c"}


async def test_the_byte_bound_evicts_by_encoded_size(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    bound = str(PAD * 3 // 2)  # one padded document fits, two do not
    r1 = platform.start_router("r1", "--action-cache-bytes", bound, "--action-cache-seconds", HOUR)
    r2 = platform.start_router("r2")
    for name in ("x", "y"):
        await put_action(client, r1, name, code(f"{name}1", PAD))
    assert [await result(client, r1, name) for name in ("x", "y")] == ["x1", "y1"]
    samples = await scrape(client, r1.url)
    assert evictions(samples, "bytes") == 1 and evictions(samples, "entries") == 0
    assert samples["apf_router_action_cache_entries{}"] == 1
    assert PAD < samples["apf_router_action_cache_bytes{}"] <= int(bound)

    await put_action(client, r2, "x", code("x2", PAD))
    assert await result(client, r1, "x") == "x2"  # evicted: read from the store again
    # the counters of both stay: the byte bound is the cache's, not the metrics'
    samples = await scrape(client, r1.url)
    assert actions_with_series(samples, "apf_router_invocations_total") == {"x", "y"}


async def test_a_create_invoke_delete_loop_leaves_no_per_action_series(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r1 = platform.start_router("r1", "--action-cache-seconds", "0")
    r2 = platform.start_router("r2")
    names = [f"loop-{i}" for i in range(5)]
    for name in names:
        await put_action(client, r1, name, code(name))
        assert await result(client, r1, name) == name
        assert (await client.delete(action_url(r1, name))).status_code == 200
    assert actions_with_series(await scrape(client, r1.url)) == set()

    # deleted through another router: r1 lets go once it finds the action gone
    await put_action(client, r1, "elsewhere", code("e"))
    assert await result(client, r1, "elsewhere") == "e"
    assert "elsewhere" in actions_with_series(await scrape(client, r1.url))
    assert (await client.delete(action_url(r2, "elsewhere"))).status_code == 200
    assert (await invoke(client, r1, "elsewhere")).status_code == 404
    assert actions_with_series(await scrape(client, r1.url)) == set()

    # the deleted actions' containers were given back, and the manager removed them
    assert platform.manager is not None
    manager = platform.manager.url

    async def all_removed() -> bool:
        held = await manager_containers(client, platform)
        removed = (await scrape(client, manager))[
            'apf_manager_container_removals_total{reason="deleted"}'
        ]
        return not held and removed == len(names) + 1

    await async_wait_until(all_removed, what="the deleted actions' containers removed")


async def test_an_action_deleted_and_created_again_runs_its_new_code(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    """Created again, an action starts at version 0.0.1 again: the router that deleted it gave
    its containers back, so none initialized with the old code is reused."""
    platform.start_manager()
    r1 = platform.start_router("r1")
    await put_action(client, r1, "again", code("old"))
    assert await result(client, r1, "again") == "old"
    assert (await client.delete(action_url(r1, "again"))).status_code == 200
    await put_action(client, r1, "again", code("new"))
    assert await result(client, r1, "again") == "new"
