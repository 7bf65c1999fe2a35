"""A thin lightkube wrapper: dicts in, dicts out, one method per row of ``calls.API_CALLS``.

Errors become ``KubeError`` (with the HTTP status, 0 when the server could not be reached) so
the backend never sees lightkube or httpx types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig, codecs
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod, PodEviction
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from gateway.manager.backends.k8s.calls import API_CALLS

FIELD_MANAGER = "apf-gateway-manager"


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


def _wrap(exc: Exception) -> KubeError:
    if isinstance(exc, ApiError):
        return KubeError(int(exc.status.code or 0), str(exc.status.message or exc))
    return KubeError(0, f"{type(exc).__name__}: {exc}")


def _dict(obj: Any) -> dict[str, Any]:
    return cast(dict[str, Any], obj.to_dict())


def _server_config(server: str, namespace: str) -> KubeConfig:
    """A plain URL without credentials (tests, ``kubectl proxy``)."""
    return KubeConfig.from_dict(
        {
            "clusters": [{"name": "api", "cluster": {"server": server}}],
            "users": [{"name": "anonymous", "user": {}}],
            "contexts": [
                {
                    "name": "api",
                    "context": {"cluster": "api", "user": "anonymous", "namespace": namespace},
                }
            ],
            "current-context": "api",
        }
    )


class KubeApi:
    def __init__(self, namespace: str, server: str | None = None) -> None:
        self.namespace = namespace
        config = _server_config(server, namespace) if server else None
        self.client = AsyncClient(config=config, namespace=namespace, field_manager=FIELD_MANAGER)
        self.calls: list[str] = []  # names of the calls made, in order (for tests and logs)

    def _call(self, name: str) -> None:
        assert name in API_CALLS, name
        self.calls.append(name)
        del self.calls[:-1000]

    async def close(self) -> None:
        await self.client.close()

    # ---- pods ----------------------------------------------------------------------------
    async def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        self._call("create_pod")
        try:
            return _dict(await self.client.create(codecs.from_dict(body)))
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def list_pods(self, labels: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
        self._call("list_pods")
        try:
            sel: dict[str, Any] = dict(labels)
            found = self.client.list(Pod, namespace=self.namespace, labels=sel)
            items = [_dict(p) async for p in found]
            return items, found.resourceVersion
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def watch_pods(
        self, labels: dict[str, str], resource_version: str, server_timeout: int = 300
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events after ``resource_version``; a 410 Gone raises ``KubeError(410)``."""
        self._call("watch_pods")
        sel: dict[str, Any] = dict(labels)
        stream = self.client.watch(
            Pod,
            namespace=self.namespace,
            labels=sel,
            resource_version=resource_version,
            server_timeout=server_timeout,
        )
        try:
            async for kind, pod in stream:
                yield kind, _dict(pod)
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def patch_pod(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self._call("patch_pod")
        try:
            pod = await self.client.patch(
                Pod, name, patch, namespace=self.namespace, patch_type=PatchType.MERGE
            )
            return _dict(pod)
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def delete_pod(self, name: str, grace_seconds: int) -> bool:
        """False if it was already gone."""
        self._call("delete_pod")
        try:
            await self.client.delete(
                Pod, name, namespace=self.namespace, grace_period=grace_seconds
            )
        except (ApiError, httpx2.HTTPError) as exc:
            err = _wrap(exc)
            if err.status == 404:
                return False
            raise err from exc
        return True

    async def evict_pod(self, name: str, grace_seconds: int) -> bool:
        """True if the eviction was accepted (or the pod is gone); False on 429 (a PDB)."""
        self._call("evict_pod")
        eviction = PodEviction(
            apiVersion="policy/v1",
            kind="Eviction",
            metadata=ObjectMeta(name=name, namespace=self.namespace),
            deleteOptions=DeleteOptions(gracePeriodSeconds=grace_seconds),
        )
        try:
            await self.client.create(eviction, name, namespace=self.namespace)
        except (ApiError, httpx2.HTTPError) as exc:
            err = _wrap(exc)
            if err.status == 429:
                return False
            if err.status == 404:
                return True
            raise err from exc
        return True

    # ---- PDB, owner ----------------------------------------------------------------------
    async def get_pdb(self, name: str) -> dict[str, Any] | None:
        self._call("get_pdb")
        return await self._get(PodDisruptionBudget, name)

    async def create_pdb(self, body: dict[str, Any]) -> dict[str, Any]:
        self._call("create_pdb")
        try:
            return _dict(await self.client.create(codecs.from_dict(body)))
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def get_deployment(self, name: str) -> dict[str, Any] | None:
        self._call("get_deployment")
        return await self._get(Deployment, name)

    # ---- leases --------------------------------------------------------------------------
    async def get_lease(self, name: str) -> dict[str, Any] | None:
        self._call("get_lease")
        return await self._get(Lease, name)

    async def create_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        self._call("create_lease")
        try:
            return _dict(await self.client.create(codecs.from_dict(body)))
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def update_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        """PUT with ``metadata.resourceVersion``: a concurrent writer gets 409."""
        self._call("update_lease")
        try:
            return _dict(await self.client.replace(codecs.from_dict(body)))
        except (ApiError, httpx2.HTTPError) as exc:
            raise _wrap(exc) from exc

    async def _get(self, res: Any, name: str) -> dict[str, Any] | None:
        try:
            return _dict(await self.client.get(res, name, namespace=self.namespace))
        except (ApiError, httpx2.HTTPError) as exc:
            err = _wrap(exc)
            if err.status == 404:
                return None
            raise err from exc
