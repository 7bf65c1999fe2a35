"""End to end through a Pod: the rendered container command really starts our runtime (run
as a local process by a fake kubelet), the handle's URL reaches it, and the OpenWhisk action
protocol works there; removal stops the process."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from conftest import NS, BackendFactory
from k8s_fakeapi import FakeCluster
from k8s_kubelet import ProcessKubelet
from test_k8s_backend import action_spec

from gateway.platform.actions import EvictionSafe
from tests.support.ports import free_port


@pytest.fixture
def kubelet(cluster: FakeCluster) -> Iterator[ProcessKubelet]:
    k = ProcessKubelet()
    cluster.kubelet = k
    yield k
    k.close()


CODE = "def main(args):\n    return {'greeting': 'hello ' + args.get('name', 'world')}\n"


async def test_a_pod_runs_the_runtime_and_serves_init_and_run(
    cluster: FakeCluster, make_backend: BackendFactory, kubelet: ProcessKubelet
) -> None:
    port = free_port()
    backend = await make_backend(runtime_port=port, start_timeout=30.0)
    handle = await backend.create(action_spec("c-000000000301", EvictionSafe.ALWAYS, 4))
    assert handle.url == f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=handle.url, timeout=10) as http:
        # the pod's runtime requires the secret the backend generated (item 1 of issue 15)
        stranger = await http.post("/init", json={"value": {"code": CODE, "main": "main"}})
        assert stranger.status_code == 401
        http.headers["Authorization"] = f"Bearer {handle.secret}"
        init = await http.post("/init", json={"value": {"code": CODE, "main": "main"}})
        assert init.status_code == 200, init.text
        run = await http.post("/run", json={"value": {"name": "pod"}})
        assert run.json() == {"greeting": "hello pod"}
    proc = kubelet.procs["c-000000000301"]
    assert proc.args[-2:] == ["--concurrency", "4"]
    await backend.remove(handle, 2)
    assert proc.poll() is not None  # SIGTERM reached the runtime
    assert cluster.pod("c-000000000301", NS) is None
    async with httpx.AsyncClient(timeout=2) as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"{handle.url}/run", content=json.dumps({"value": {}}))
