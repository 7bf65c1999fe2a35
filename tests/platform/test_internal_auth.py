"""Issue 15, item 3: the manager API and the routers' internal endpoints require the internal
token (real manager and router processes); state files are the platform user's only."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from platform_support import Platform, invoke, put_action

from gateway.cli.up import _internal_token
from gateway.platform import internal_token

WRONG = {"Authorization": "Bearer " + "x" * 43}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_manager_api_requires_the_token(platform: Platform) -> None:
    manager = platform.start_manager()
    async with httpx.AsyncClient(timeout=10) as http:
        for headers in ({}, WRONG, {"Authorization": platform.token}):  # no "Bearer "
            for method, path in (
                ("GET", "/v1/containers"),
                ("GET", "/v1/routers"),
                ("POST", "/v1/drain"),
                ("POST", "/v1/routers"),
                ("POST", "/v1/acquire"),
            ):
                resp = await http.request(method, manager.url + path, headers=headers, json={})
                assert resp.status_code == 401, (path, resp.text)
                assert "internal token" in resp.json()["error"]
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        ok = await http.get(manager.url + "/v1/containers", headers=platform.auth)
        assert ok.status_code == 200 and ok.json()["containers"] == []
        for probe in ("/healthz", "/readyz", "/metrics"):  # probes and scrapes stay open
            assert (await http.get(manager.url + probe)).status_code == 200


async def test_router_internal_endpoints_require_the_token(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    manager = platform.start_manager()
    router = platform.start_router("r1")
    await put_action(client, router, "hello", "def main(a):\n    return {'hi': 1}\n")
    assert (await invoke(client, router, "hello")).status_code == 200
    async with httpx.AsyncClient(timeout=10) as http:
        for headers in ({}, WRONG):
            state = await http.get(router.url + "/_platform/v1/state", headers=headers)
            assert state.status_code == 401 and "internal token" in state.json()["error"]
            back = await http.post(
                router.url + "/_platform/v1/containers/c-x/giveback", headers=headers, json={}
            )
            assert back.status_code == 401
        state = await http.get(router.url + "/_platform/v1/state", headers=platform.auth)
        assert state.status_code == 200 and len(state.json()["containers"]) == 1
        # the manager's answers to the router carry the container's secret; listings do not
        listing = await http.get(manager.url + "/v1/containers", headers=platform.auth)
        (container,) = listing.json()["containers"]
        assert "secret" not in container
        mine = await http.get(
            f"{manager.url}/v1/routers/r1/containers",
            headers=platform.auth,
        )
        assert len(mine.json()["containers"][0]["secret"]) >= 32


async def test_state_files_are_the_platform_users_only(
    platform: Platform, client: httpx.AsyncClient
) -> None:
    platform.start_manager()
    router = platform.start_router("r1")
    await put_action(client, router, "hello", "def main(a):\n    print('x')\n    return {}\n")
    assert (await invoke(client, router, "hello")).status_code == 200
    assert mode(platform.token_file) == 0o600
    containers = platform.state / "containers"
    assert mode(platform.state) == 0o700 and mode(containers) == 0o700
    (folder,) = list(containers.iterdir())
    assert mode(folder) == 0o700
    for name in ("container.json", "stdout.log", "stderr.log"):
        assert mode(folder / name) == 0o600, name
    assert json.loads((folder / "container.json").read_text())["secret"]


def test_up_writes_a_fresh_private_token(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir(mode=0o755)
    first = _internal_token(root)
    token = internal_token.read(first)
    assert mode(root) == 0o700 and mode(first) == 0o600
    assert internal_token.read(_internal_token(root)) != token  # one per run


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t" * 40)
    token.chmod(0o644)
    done = _cli(
        "manager", "serve", "--state-dir", str(tmp_path), "--internal-token-file", str(token)
    )
    assert done.returncode == 2
    assert f"{token} is readable by others (mode 644): chmod 600 it" in done.stderr
    done = _cli("router", "--internal-token-file", str(tmp_path / "missing"))
    assert done.returncode == 2 and "cannot read the internal token file" in done.stderr


def test_manager_cli_sends_the_token_and_explains_a_refusal(platform: Platform) -> None:
    manager = platform.start_manager()
    done = _cli(
        "manager",
        "containers",
        "--manager",
        manager.url,
        "--internal-token-file",
        str(platform.token_file),
    )
    assert done.returncode == 0 and json.loads(done.stdout)["containers"] == []
    other = platform.root / "other-token"
    internal_token.write(other)
    done = _cli(
        "manager", "containers", "--manager", manager.url, "--internal-token-file", str(other)
    )
    assert done.returncode == 1 and "internal token" in done.stderr


@pytest.mark.parametrize("header", ["", "Bearer ", "Bearer wrong", "Basic abc"])
def test_matches_is_exact(header: str) -> None:
    token = "k" * 43
    assert not internal_token.matches(header, token)
    assert internal_token.matches(f"Bearer {token}", token)
