"""Manager restart during warm traffic, upgrade drains per eviction.safe, evict API, pause."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from platform_support import (
    SLOW,
    Platform,
    annotation,
    invoke,
    manager_containers,
    manager_containers_until,
    put_action,
    scrape,
    wait_running,
)

from gateway.cli.main import main
from tests.support.wait import async_wait_for, async_wait_until


def proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def test_manager_restart_keeps_warm_traffic(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager("--keep-containers", "--lease-seconds", "1")
    r = platform.start_router("r1", "--buffer-seconds", "1")
    await put_action(client, r, "warm", SLOW)
    await put_action(client, r, "cold", SLOW)
    cid = annotation((await invoke(client, r, "warm", {"sleep": 0})).json(), "container")
    assert platform.manager is not None
    port = int(platform.manager.url.rsplit(":", 1)[1])
    platform.manager.stop()
    # the manager is down: warm invocations keep working (it is off the hot path)
    for _ in range(5):
        resp = await invoke(client, r, "warm", {"sleep": 0})
        assert resp.status_code == 200 and annotation(resp.json(), "container") == cid
    # but a cold start needs the manager: 503 once the buffer time is over
    cold = await invoke(client, r, "cold", {"sleep": 0})
    assert cold.status_code == 503 and "manager is unavailable" in cold.json()["error"]
    platform.start_manager("--keep-containers", "--lease-seconds", "1", port=port)
    # the new manager recovers the container; the router re-registers and reclaims it
    await manager_containers_until(
        client,
        platform,
        lambda found: found.get(cid, {}).get("owner") == "r1",
        f"{cid} recovered and reclaimed by r1",
    )
    resp = await invoke(client, r, "warm", {"sleep": 0})
    assert resp.status_code == 200 and annotation(resp.json(), "container") == cid


async def test_drain_per_eviction_policy(
    platform: Platform, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """One upgrade drain (`apf-gateway manager drain`) over four busy containers. Never: the
    drain answers that it waits for the activation, which completes; the container is
    removed after it. OnUpgrade/Always: routing stops, the run gets the grace
    period (the manager's 1 s), then SIGTERM and SIGKILL after the grace: a 6 s run is cut
    short. An action's own grace period (3 s) lets its 1.5 s run finish."""
    platform.start_manager()
    r = platform.start_router("r1")
    cases = {  # name: (eviction, sleep, completes)
        "never": ({"safe": "Never"}, 1.0, True),
        "upgrade": ({"safe": "OnUpgrade"}, 6.0, False),
        "always": ({"safe": "Always"}, 6.0, False),
        "graced": ({"safe": "OnUpgrade", "terminationGracePeriodSeconds": 3}, 1.5, True),
    }
    for name, (eviction, _, _) in cases.items():
        await put_action(client, r, name, SLOW, eviction=eviction)
    await asyncio.gather(*(invoke(client, r, name, {"sleep": 0}) for name in cases))
    running = {
        name: asyncio.ensure_future(invoke(client, r, name, {"sleep": sleep}))
        for name, (_, sleep, _) in cases.items()
    }
    await wait_running(client, r.url, platform.auth, len(cases))
    assert platform.manager is not None

    argv = ["manager", "drain", "--manager", platform.manager.url]
    argv += ["--internal-token-file", str(platform.token_file)]
    assert await asyncio.to_thread(main, argv) == 0
    drained = json.loads(capsys.readouterr().out)
    assert drained["kept"] == {}
    assert sorted(drained["drained"].values()) == sorted(
        ["when-idle", "graceful-stop", "graceful-stop", "graceful-stop"]
    )
    (never,) = [cid for cid, d in drained["drained"].items() if d == "when-idle"]
    assert list(drained["waiting"]) == [never]
    for name, (_, _, completes) in cases.items():
        resp = await running[name]
        assert (resp.status_code == 200) is completes, (name, resp.text)
    # the Never container goes once its owner has given it back
    await manager_containers_until(client, platform, lambda found: not found, "no containers")
    seen = await scrape(client, platform.manager.url)
    for policy, outcome, n in (
        ("Never", "removed-idle", 1),
        ("OnUpgrade", "stopped", 2),
        ("Always", "stopped", 1),
    ):
        labels = f'outcome="{outcome}",policy="{policy}",reason="upgrade"'
        assert seen[f"apf_manager_evictions_total{{{labels}}}"] == n
    assert seen['apf_manager_container_removals_total{reason="upgrade"}'] == 4


EVICT_CELLS = [
    ("Never", "space", False),
    ("Never", "scale-down", False),
    ("OnUpgrade", "space", False),
    ("OnUpgrade", "scale-down", False),
    ("OnUpgrade", "upgrade", True),
    ("Always", "scale-down", True),
]


async def test_evict_api_follows_the_table(platform: Platform, client: httpx.AsyncClient) -> None:
    """The cells the drain and quota tests do not reach, through the evict API."""
    platform.start_manager()
    r = platform.start_router("r1")
    assert platform.manager is not None
    cids = []
    for i, (safe, _, _) in enumerate(EVICT_CELLS):
        await put_action(client, r, f"e{i}", SLOW, eviction={"safe": safe})
        cids.append(
            annotation((await invoke(client, r, f"e{i}", {"sleep": 0})).json(), "container")
        )
    for cid, (safe, reason, allowed) in zip(cids, EVICT_CELLS, strict=True):
        resp = await client.post(
            f"{platform.manager.url}/v1/containers/{cid}/evict",
            json={"reason": reason},
            headers=platform.auth,
        )
        assert (resp.status_code == 200) is allowed, (safe, reason, resp.text)
        if not allowed:
            assert resp.status_code == 429
            assert f"eviction.safe={safe}" in resp.json()["error"]
    remaining = {c["id"] for c in await manager_containers(client, platform)}
    assert remaining == {cid for cid, cell in zip(cids, EVICT_CELLS, strict=True) if not cell[2]}


async def test_idle_container_is_paused_resumed_and_given_back(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r = platform.start_router("r1", "--pause-grace", "0.2", "--idle-timeout", "1")
    await put_action(client, r, "p", SLOW)
    await invoke(client, r, "p", {"sleep": 0})
    (c,) = await manager_containers(client, platform)
    pid = c["agent"]["pid"]
    await async_wait_until(lambda: proc_state(pid) == "T", what=f"{pid} stopped by SIGSTOP")
    resp = await invoke(client, r, "p", {"sleep": 0})
    assert resp.status_code == 200 and annotation(resp.json(), "container") == c["id"]
    assert proc_state(pid) in ("S", "R", "T")  # resumed for the run (and maybe paused again)
    # after the idle timeout the router gives it back and the manager removes it
    await manager_containers_until(client, platform, lambda found: not found, "no containers")


async def test_stem_cell_serves_the_first_invoke_and_updates_retire_old_containers(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager("--prewarm", "python:3=1")
    r = platform.start_router("r1")
    assert platform.manager is not None
    manager = platform.manager

    async def stems() -> list[str] | None:
        resp = await client.get(manager.url + "/v1/containers", headers=platform.auth)
        return resp.json()["stems"] or None

    (stem,) = await async_wait_for(stems, what="a prewarmed stem cell", interval=0.05)
    await put_action(client, r, "fresh", SLOW)
    first = await invoke(client, r, "fresh", {"sleep": 0})
    assert annotation(first.json(), "container") == stem  # bound, not started
    await put_action(client, r, "fresh", "def main(a):\n    return {'v': 2}\n")
    second = await invoke(client, r, "fresh")
    assert second.json()["response"]["result"] == {"v": 2}
    assert annotation(second.json(), "container") != stem
    await manager_containers_until(  # the old revision's idle container is given back
        client, platform, lambda found: stem not in found, f"the old revision's {stem} removed"
    )
