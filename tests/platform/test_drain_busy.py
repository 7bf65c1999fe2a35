"""`POST /v1/drain` over a busy `Never` container, on real manager, router and runtime
processes: the drain answers at once (202, naming the container it waits for), the router
stops routing to it and never adopts it again from a lease answer, the running activation
completes, and the container is removed after it."""

from __future__ import annotations

import asyncio
import itertools
import json

import httpx
import pytest
from platform_support import (
    SLOW,
    Platform,
    annotation,
    invoke,
    manager_containers,
    put_action,
    router_state,
    wait_running,
)
from test_platform_up import alive

from gateway.cli.main import main
from gateway.manager.core import ActionSpec, CState, ManagerCore, ManagerSettings
from gateway.testing import FakeEventClock
from tests.support.wait import async_wait_until


async def lease_renewals(
    client: httpx.AsyncClient, platform: Platform, router: str, count: int
) -> None:
    """Poll the manager until ``router`` renewed its lease ``count`` times (its remaining
    lease time went up)."""
    assert platform.manager is not None
    url = platform.manager.url + "/v1/routers"
    seen: list[float] = []

    async def renewed() -> bool:
        resp = await client.get(url, headers=platform.auth)
        (left,) = [r["expires_in"] for r in resp.json()["routers"] if r["id"] == router]
        seen.append(left)
        return sum(b > a for a, b in itertools.pairwise(seen)) >= count

    await async_wait_until(renewed, 20, f"{count} lease renewals by {router}")


async def test_drain_answers_at_once_and_removes_the_busy_container_after_its_run(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    # a 1 s lease: the router renews every ~0.3 s while the 3 s activation runs, so a lease
    # answer still listing the container would have handed it back to the router
    platform.start_manager("--lease-seconds", "1")
    r = platform.start_router("r1")
    assert platform.manager is not None
    drain_url = platform.manager.url + "/v1/drain"
    await put_action(client, r, "never", SLOW, eviction={"safe": "Never"})
    first = await invoke(client, r, "never", {"sleep": 0})
    cid = annotation(first.json(), "container")
    (record,) = await manager_containers(client, platform)
    pid = int(record["agent"]["pid"])
    running = asyncio.ensure_future(invoke(client, r, "never", {"sleep": 3}))
    assert (await wait_running(client, r.url, platform.auth, 1)) == {cid: 1}
    async with httpx.AsyncClient(timeout=5) as quick:  # it used to hang until the run ended
        resp = await quick.post(drain_url, json={}, headers=platform.auth)
        assert resp.status_code == 202, resp.text
        body = resp.json()
        assert body["drained"] == {cid: "when-idle"} and body["kept"] == {}
        assert list(body["waiting"]) == [cid] and "busy" in body["waiting"][cid]
        await lease_renewals(client, platform, "r1", 3)
        assert cid not in await router_state(
            client, r.url, platform.auth
        )  # not routed to, not re-adopted
        (draining,) = await manager_containers(client, platform)
        assert draining["state"] == "draining" and draining["owner"] == "r1"
        again = await quick.post(drain_url, json={}, headers=platform.auth)
        assert again.status_code == 202 and list(again.json()["waiting"]) == [cid]
    other = await invoke(client, r, "never", {"sleep": 0})  # served by a new container
    assert other.status_code == 200 and annotation(other.json(), "container") != cid
    done = await running
    assert done.status_code == 200, done.text  # Never: the run is never cut
    assert annotation(done.json(), "container") == cid

    async def removed() -> bool:
        return cid not in {c["id"] for c in await manager_containers(client, platform)}

    await async_wait_until(removed, 10, "the drained container removed after its activation")
    await async_wait_until(lambda: not alive(pid), 10, "the drained container's process gone")
    final = await client.post(
        drain_url, json={}, headers=platform.auth
    )  # the idle new container goes at once
    assert final.status_code == 200 and final.json()["waiting"] == {}
    assert await manager_containers(client, platform) == []


async def test_manager_drain_wait_returns_once_the_busy_container_is_gone(
    platform: Platform, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    assert platform.manager is not None
    await put_action(client, r, "never", SLOW)
    cid = annotation((await invoke(client, r, "never", {"sleep": 0})).json(), "container")
    running = asyncio.ensure_future(invoke(client, r, "never", {"sleep": 2}))
    assert (await wait_running(client, r.url, platform.auth, 1)) == {cid: 1}
    argv = ["manager", "drain", "--manager", platform.manager.url, "--wait", "30"]
    argv += ["--internal-token-file", str(platform.token_file)]
    assert await asyncio.to_thread(main, argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"drained": {cid: "when-idle"}, "kept": {}, "waiting": {}}
    assert (await running).status_code == 200
    assert cid not in {
        c["id"] for c in await manager_containers(client, platform) if c["state"] != "removing"
    }


def drain_setup() -> tuple[ManagerCore, FakeEventClock, list[str], str]:
    clock = FakeEventClock()
    removed: list[str] = []
    core = ManagerCore(clock, ManagerSettings(lease_seconds=10.0), lambda c: removed.append(c.id))
    core.register("r1", "u1")
    action = ActionSpec("guest", "a", "0.0.1", "python:3", timeout_ms=30000)
    (made,) = core.acquire("r1", action).create
    core.created(made.id, "http://c", {})
    assert core.begin_drain(made.id, "upgrade") is not None
    return core, clock, removed, made.id


def test_a_draining_container_is_never_listed_nor_reassigned() -> None:
    core, _, removed, cid = drain_setup()
    assert core.assignments("r1") == []
    core.register("r1", "u1", [cid])  # a router offering it back does not get it
    assert core.containers[cid].state is CState.DRAINING and core.assignments("r1") == []
    assert removed == []


def test_a_draining_container_whose_owner_is_lost_goes_after_the_time_limit() -> None:
    core, clock, removed, cid = drain_setup()
    clock.advance(10.0)  # the lease lapses: its activation may still run up to 30 s
    assert core.containers[cid].state is CState.DRAINING and removed == []
    clock.advance(30.0 + 1.0 - 0.01)
    assert removed == []
    clock.advance(0.02)
    assert removed == [cid] and core.containers[cid].state is CState.REMOVING


def test_a_draining_container_goes_when_its_owner_leaves_gracefully() -> None:
    core, _, removed, cid = drain_setup()
    core.deregister("r1")
    assert removed == [cid]


def test_a_draining_container_of_a_restarted_router_goes_after_the_time_limit() -> None:
    """A router process that died and came back under the same id will never give back the
    container its predecessor was draining: it is removed once the activation that may still
    run in it has passed its time limit (not kept for ever, not reassigned)."""
    core, clock, removed, cid = drain_setup()
    core.register("r1", "u1", [], incarnation="second-process")
    assert core.containers[cid].state is CState.DRAINING and core.assignments("r1") == []
    for _ in range(6):  # the new process keeps its lease; the old container still goes
        clock.advance(5.0)
        core.renew("r1")
    clock.advance(1.0 - 0.01)
    assert removed == []
    clock.advance(0.02)
    assert removed == [cid]
