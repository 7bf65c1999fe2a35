"""The OpenWhisk action API end to end: real manager, router and runtime processes."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
from platform_support import (
    SLOW,
    Platform,
    action_url,
    annotation,
    invoke,
    manager_containers,
    manager_containers_until,
    put_action,
    recorded,
    router_state,
    scrape,
)

from tests.support.wait import async_wait_until

HELLO = """
def main(args):
    print("hello", args.get("name"))
    return {"greeting": "hi " + args.get("name", "x")}
"""


async def test_crud_invoke_and_activations(platform: Platform, client: httpx.AsyncClient) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    url = action_url(r, "hello")
    assert (await client.get(url)).status_code == 404
    created = await put_action(client, r, "hello", HELLO, parameters=[{"key": "k", "value": 1}])
    assert created["version"] == "0.0.1" and created["namespace"] == "guest"
    dup = await client.put(url, json={"exec": {"kind": "python:3", "code": HELLO}})
    assert dup.status_code == 409 and set(dup.json()) == {"error", "code"}
    updated = await put_action(client, r, "hello", HELLO)
    assert updated["version"] == "0.0.2"
    listed = (await client.get(f"{r.url}/api/v1/namespaces/_/actions?limit=5")).json()
    assert [a["name"] for a in listed] == ["hello"] and "code" not in listed[0]["exec"]
    bad = await client.put(action_url(r, "x"), json={"exec": {"kind": "nodejs:20", "code": "1"}})
    assert bad.status_code == 400 and "not supported" in bad.json()["error"]

    # blocking: cold start carries initTime, the warm one does not
    cold = await invoke(client, r, "hello", {"name": "bob"})
    assert cold.status_code == 200, cold.text
    record = cold.json()
    assert cold.headers["x-openwhisk-activation-id"] == record["activationId"]
    assert len(record["activationId"]) == 32
    assert record["response"] == {
        "status": "success",
        "statusCode": 0,
        "success": True,
        "result": {"greeting": "hi bob"},
    }
    assert annotation(record, "initTime") is not None
    assert annotation(record, "path") == "guest/hello"
    assert annotation(record, "container").startswith("c-")
    assert any("stdout: hello bob" in line for line in record["logs"])
    huge = await invoke(client, r, "hello", {"name": "x" * (1024 * 1024)})
    assert huge.status_code == 413
    warm = await invoke(client, r, "hello", {"name": "eve"}, "blocking=true&result=true")
    assert warm.json() == {"greeting": "hi eve"}

    # non-blocking: 202 with the id, then the record can be fetched
    resp = await invoke(client, r, "hello", {"name": "zed"}, "blocking=false")
    assert resp.status_code == 202
    aid = resp.json()["activationId"]
    base = f"{r.url}/api/v1/namespaces/_/activations/{aid}"
    got = await recorded(client, base)
    assert got.status_code == 200 and got.json()["response"]["result"] == {"greeting": "hi zed"}
    assert annotation(got.json(), "initTime") is None  # warm
    assert (await client.get(base + "/result")).json()["result"] == {"greeting": "hi zed"}
    assert any("hello zed" in x for x in (await client.get(base + "/logs")).json()["logs"])
    listing = (await client.get(f"{r.url}/api/v1/namespaces/_/activations?name=hello")).json()
    assert aid in {a["activationId"] for a in listing}
    assert (await client.get(f"{r.url}/api/v1/namespaces/_/activations/nothex")).status_code == 400

    # another namespace is forbidden; deleting works
    other = await client.get(f"{r.url}/api/v1/namespaces/bob/actions/hello")
    assert other.status_code == 403

    # platform metrics: one cold start, the rest warm; the container is idle now
    seen = await scrape(client, r.url)
    ok = 'action="hello",namespace="guest",status="success"'
    assert seen[f"apf_router_invocations_total{{{ok}}}"] == 3
    assert seen['apf_router_cold_starts_total{action="hello",namespace="guest"}'] == 1
    assert seen['apf_router_init_duration_seconds_count{kind="python:3"}'] == 1
    assert seen['apf_router_wait_duration_seconds_count{start="warm"}'] == 2
    assert seen['apf_router_containers{action="hello",namespace="guest",state="warm"}'] == 1
    assert seen["apf_router_activation_write_failures_total{}"] == 0
    assert platform.manager is not None
    made = await scrape(client, platform.manager.url)
    assert (
        made['apf_manager_container_creations_total{kind="python:3",result="ok",source="new"}'] == 1
    )
    assert made['apf_manager_containers{state="assigned"}'] == 1
    assert made["apf_manager_routers{}"] == 1
    assert (await client.delete(url)).status_code == 200
    assert (await invoke(client, r, "hello")).status_code == 404


async def test_failure_paths(platform: Platform, client: httpx.AsyncClient) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "boom", "def main(a):\n    raise ValueError('bad input')\n")
    resp = await invoke(client, r, "boom")
    assert resp.status_code == 502
    assert resp.json()["response"]["status"] == "application error"
    assert "bad input" in str(resp.json()["response"]["result"]["error"])

    await put_action(client, r, "syntax", "def main(a:\n    return {}\n")
    resp = await invoke(client, r, "syntax")
    assert resp.status_code == 502
    assert resp.json()["response"]["status"] == "action developer error"

    await put_action(client, r, "slow", SLOW, limits={"timeout": 300})
    resp = await invoke(client, r, "slow", {"sleep": 5})
    assert resp.status_code == 502
    record = resp.json()
    assert record["response"]["result"] == {
        "error": "The action exceeded its time limits of 300 milliseconds."
    }
    assert annotation(record, "timeout") is True
    dead = annotation(record, "container")
    await manager_containers_until(
        client, platform, lambda found: dead not in found, f"the timed-out {dead} removed"
    )
    again = await invoke(client, r, "slow", {"sleep": 0})
    assert again.status_code == 200 and annotation(again.json(), "container") != dead

    # runtime process killed mid-run: developer error, then a replacement serves
    await put_action(client, r, "victim", SLOW)
    assert (await invoke(client, r, "victim", {"sleep": 0})).status_code == 200
    # a blocking invoke that outlasts its wait limit answers 202, and still completes
    late = await invoke(client, r, "victim", {"sleep": 0.6}, "blocking=true&timeout=100")
    assert late.status_code == 202
    late_id = late.json()["activationId"]
    assert late.headers["x-openwhisk-activation-id"] == late_id
    got = await recorded(client, f"{r.url}/api/v1/namespaces/_/activations/{late_id}")
    assert got.json()["response"]["result"] == {"slept": 0.6}
    (victim,) = [
        c for c in await manager_containers(client, platform) if c["action"]["name"] == "victim"
    ]
    task = asyncio.ensure_future(invoke(client, r, "victim", {"sleep": 3}))

    async def victim_runs() -> bool:
        return (await router_state(client, r.url, platform.auth)).get(victim["id"]) == 1

    await async_wait_until(victim_runs, 20, "the run in the victim container")
    os.killpg(victim["agent"]["pid"], signal.SIGKILL)
    resp = await task
    assert resp.status_code == 502
    assert resp.json()["response"]["result"]["error"] == (
        "The action did not produce a valid response and exited unexpectedly."
    )
    after = await invoke(client, r, "victim", {"sleep": 0})
    assert after.status_code == 200 and annotation(after.json(), "container") != victim["id"]
