"""Fixtures: the fake API server (see k8s_fakeapi) and backends talking to it.

After each test, every object body the code POSTed or PUT is validated against the real
Kubernetes schemas (kubernetes-validate, offline, strict), and every request's RBAC triple
must be one the manager's Role grants (``calls.API_CALLS``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import kubernetes_validate
import pytest
from k8s_fakeapi import FakeCluster
from k8s_fakehttp import serve

from gateway.manager.backends.k8s.calls import rbac_triples
from gateway.manager.backends.kubernetes import KubernetesBackend

KUBE_VERSION = "1.35.0"
NS = "apf"


def validate(obj: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        name = obj.get("metadata", {}).get("name")
        raise AssertionError(f"{obj.get('kind')} {name}: {str(exc)[:400]}") from None


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    c = FakeCluster()
    await c.add_deployment("apf-gateway-manager", NS)
    yield c
    for body in c.bodies("POST") + c.bodies("PUT"):
        validate(body)
    extra = c.rbac_used() - rbac_triples()
    assert not extra, f"calls the Role does not grant: {extra}"


@pytest.fixture
async def api_url(cluster: FakeCluster) -> AsyncIterator[str]:
    async with serve(cluster) as url:
        yield url


BackendFactory = Callable[..., Awaitable[KubernetesBackend]]


@pytest.fixture
async def make_backend(api_url: str) -> AsyncIterator[BackendFactory]:
    made: list[KubernetesBackend] = []

    async def factory(**options: Any) -> KubernetesBackend:
        options = {
            "server": api_url,
            "namespace": NS,
            "owner_deployment": "apf-gateway-manager",
            "start_timeout": 5.0,
            **options,
        }
        backend = KubernetesBackend(**options)
        made.append(backend)
        await backend.start()
        return backend

    yield factory
    for backend in made:
        await backend.close()
