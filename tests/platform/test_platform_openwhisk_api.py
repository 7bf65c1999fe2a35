"""The OpenWhisk API's edges on a real router (and manager): namespaces, list counts and pages,
``code=false``, OpenWhisk's error texts, and 501 for what the platform does not build."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
from platform_support import Platform, action_url, invoke, openwhisk_error, put_action

ECHO = "def main(args):\n    return args\n"


async def test_namespaces_counts_pages_and_code(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    api = f"{r.url}/api/v1/namespaces"
    for path in ("", "/"):
        got = await client.get(api + path)
        assert got.status_code == 200 and got.json() == ["guest"]
    anonymous = await client.get(api, headers={"X-Remote-User": "", "X-Remote-Extra-Namespace": ""})
    assert openwhisk_error(anonymous, 401) == "The supplied authentication is invalid"

    for i in range(5):
        await put_action(client, r, f"a{i}", ECHO)
    actions = f"{api}/_/actions"
    assert (await client.get(actions + "?count=true")).json() == {"actions": 5}
    assert (await client.get(actions + "?count=true&skip=2")).json() == {"actions": 3}
    assert (await client.get(actions + "?count=yes&skip=9")).json() == {"actions": 0}
    names = [a["name"] for a in (await client.get(actions + "?limit=2&skip=1")).json()]
    assert names == ["a3", "a2"]  # newest first
    assert len((await client.get(actions + "?limit=0")).json()) == 5  # 0: up to the maximum
    malformed = {
        "limit=201": "The query parameter 'limit' was malformed:\n"
        "The value '201' is not in the range of 0 to 200 for actions.",
        "skip=-1": "The query parameter 'skip' was malformed:\n"
        "The value '-1' is not greater than or equal to 0 for actions.",
        "limit=x": "The query parameter 'limit' was malformed:\n"
        "The value 'x' is not an integer for actions.",
        "count=maybe": "The query parameter 'count' was malformed:\n"
        "'maybe' is not a valid Boolean value",
    }
    for query, message in malformed.items():
        assert openwhisk_error(await client.get(f"{actions}?{query}"), 400) == message

    full = (await client.get(action_url(r, "a0"))).json()
    assert full["exec"]["code"] == ECHO
    meta = (await client.get(action_url(r, "a0") + "?code=false")).json()
    assert "code" not in meta["exec"]
    assert meta["exec"] == {k: v for k, v in full["exec"].items() if k != "code"}
    assert meta["exec"]["kind"] == "python:3" and meta["name"] == "a0"

    for i in range(3):
        assert (await invoke(client, r, "a1", {"i": i})).status_code == 200
    await invoke(client, r, "a2")
    activations = f"{api}/_/activations"
    assert (await client.get(activations + "?count=true")).json() == {"activations": 4}
    counted = await client.get(activations + "?count=true&name=a1&skip=1")
    assert counted.json() == {"activations": 2}
    assert len((await client.get(activations + "?name=a1&limit=2")).json()) == 2


async def test_openwhisk_error_texts(
    platform: Platform, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    await put_action(client, r, "echo", ECHO)
    url = action_url(r, "echo")

    missing = await client.get(action_url(r, "nothing"))
    assert openwhisk_error(missing, 404) == "The requested resource does not exist."
    dup = await client.put(url, json={"exec": {"kind": "python:3", "code": ECHO}})
    assert openwhisk_error(dup, 409) == "resource already exists"
    other = await client.get(action_url(r, "echo", ns="someone"))
    assert openwhisk_error(other, 403) == (
        "The supplied authentication is not authorized to access 'someone'."
    )
    patch = await client.patch(url)
    assert openwhisk_error(patch, 405) == (
        "HTTP method not allowed, supported methods: DELETE, GET, HEAD, POST, PUT"
    )
    assert patch.headers["allow"] == "DELETE,GET,HEAD,POST,PUT"
    bad_json = await client.post(url + "?blocking=true", content=b"{not json")
    assert openwhisk_error(bad_json, 400).startswith("The request content was malformed:\n")
    bad_put = await client.put(url + "?overwrite=true", content=b"[1,")
    assert openwhisk_error(bad_put, 400).startswith("The request content was malformed:\n")
    big = b'{"x": "' + b"y" * (1024 * 1024) + b'"}'
    too_big = await client.post(url + "?blocking=true", content=big)
    assert openwhisk_error(too_big, 413) == (
        f"Request larger than allowed: {len(big)} > {1024 * 1024} bytes."
    )

    huge = await client.get(f"{r.url}/api/v1/namespaces/_/activations?since=1{'0' * 30}")
    assert openwhisk_error(huge, 400) == "since must be epoch milliseconds."

    # a store the router cannot read: 500 with OpenWhisk's text, not aiohttp's page
    with sqlite3.connect(tmp_path / "platform.db") as db:
        db.execute("DROP TABLE actions")
    broken = await client.get(url)
    assert openwhisk_error(broken, 500) == "There was an internal server error."
    # a broken store is not an outage (that is 503): one log line with the reason, no traceback
    log = (platform.root / "router-r1.log").read_text()
    assert "no such table: actions" in log and "Traceback" not in log, log[-2000:]


async def test_what_is_not_built_is_501(platform: Platform, client: httpx.AsyncClient) -> None:
    platform.start_manager()
    r = platform.start_router("r1")
    ns = f"{r.url}/api/v1/namespaces/_"
    expected = {
        ("GET", f"{ns}/packages"): "Packages",
        ("PUT", f"{ns}/packages/utils"): "Packages",
        ("GET", f"{ns}/actions/utils/echo"): "Packages",
        ("POST", f"{ns}/actions/utils/echo?blocking=true"): "Packages",
        ("GET", f"{ns}/triggers"): "Triggers",
        ("POST", f"{ns}/triggers/t1"): "Triggers",
        ("GET", f"{ns}/rules/r1"): "Rules",
        ("GET", f"{r.url}/api/v1/web/guest/default/echo.json"): "Web actions",
    }
    for (method, url), what in expected.items():
        got = await client.request(method, url)
        assert openwhisk_error(got, 501) == f"{what} are not implemented by this platform."
    sequence = {"exec": {"kind": "sequence", "components": ["/guest/a", "/guest/b"]}}
    seq = await client.put(action_url(r, "seq"), json=sequence)
    assert openwhisk_error(seq, 501) == "Sequences are not implemented by this platform."
    # identity first: an unidentified caller learns nothing about what exists
    anon = await client.get(f"{ns}/triggers", headers={"X-Remote-User": ""})
    assert anon.status_code == 401
    other = await client.get(f"{r.url}/api/v1/namespaces/bob/rules")
    assert other.status_code == 403
