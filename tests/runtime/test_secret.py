"""The runtime's container secret (issue 15): required on /init and /run, in constant time,
taken from an inherited descriptor or out of the environment (the action never sees it)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest

SECRET = "z" * 43
ENV_CODE = "import os\ndef main(a):\n    return {'keys': sorted(os.environ)}\n"


@pytest.fixture
def runtimes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def launch(procs: list[subprocess.Popen[bytes]], *, by_fd: bool) -> str:
    argv = [sys.executable, "-m", "gateway.runtime", "--host", "127.0.0.1", "--port", "0"]
    env = dict(os.environ)
    pass_fds: tuple[int, ...] = ()
    if by_fd:
        read, write = os.pipe()
        os.write(write, SECRET.encode())
        os.close(write)
        argv += ["--secret-fd", str(read)]
        pass_fds = (read,)
    else:
        env["APF_CONTAINER_SECRET"] = SECRET
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, pass_fds=pass_fds)
    if by_fd:
        os.close(pass_fds[0])
    procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    assert line.startswith("LISTENING "), line
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return f"http://127.0.0.1:{int(line.split()[1])}"


@pytest.mark.parametrize("by_fd", [True, False], ids=["fd", "env"])
async def test_init_and_run_need_the_secret(
    runtimes: list[subprocess.Popen[bytes]], by_fd: bool
) -> None:
    url = launch(runtimes, by_fd=by_fd)
    init = {"value": {"code": ENV_CODE}}
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": SECRET}):
            for path in ("/init", "/run"):
                resp = await http.post(path, json=init, headers=headers)
                assert resp.status_code == 401, (path, headers)
                assert "container secret" in resp.json()["error"]
        # the same kept-alive connection goes on working once the secret is sent
        http.headers["Authorization"] = f"Bearer {SECRET}"
        assert (await http.post("/init", json=init)).status_code == 200
        run = await http.post("/run", json={"value": {}})
        assert run.status_code == 200
        assert "APF_CONTAINER_SECRET" not in run.json()["keys"]
