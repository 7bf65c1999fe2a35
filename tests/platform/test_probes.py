"""/livez and /readyz of the router and the manager (the manifests' probes use them)."""

from __future__ import annotations

import httpx
from platform_support import Platform
from test_manager_service import MemoryBackend

from gateway.manager.service import ManagerService, ServiceSettings
from gateway.router.app import Router, RouterSettings


def test_a_router_is_ready_once_registered_and_until_it_drains() -> None:
    router = Router(RouterSettings("r1", "http://127.0.0.1:9", "sqlite:///unused.db"))
    assert router.ready() == (False, "not registered with the container manager yet")
    router.invoker = type("Registered", (), {"ever_registered": True})()  # type: ignore[assignment]
    assert router.ready() == (True, "ok")
    router.draining = True
    assert router.ready() == (False, "draining: shutting down")


async def test_the_manager_is_ready_between_recovery_and_shutdown() -> None:
    service = ManagerService(MemoryBackend(), ServiceSettings(remove_on_exit=False))
    assert service.ready() == (False, "recovering the backend's containers")
    await service.start()
    assert service.ready() == (True, "ok")
    await service.stop()
    assert service.ready() == (False, "stopping")


async def test_probes_over_http(platform: Platform, client: httpx.AsyncClient) -> None:
    manager = platform.start_manager()
    router = platform.start_router("r1")
    for base in (manager.url, router.url):
        for path in ("/livez", "/readyz", "/healthz"):
            resp = await client.get(base + path)
            assert resp.status_code == 200 and resp.text == "ok\n", (base, path)
