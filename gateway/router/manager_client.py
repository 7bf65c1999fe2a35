"""The router's calls to the manager (off the hot path: only when it runs out of containers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.manager.model import ActionSpec


class ManagerUnavailable(Exception):
    pass


class UnknownToManager(Exception):
    """The manager does not know this router (it restarted or the lease expired)."""


@dataclass(slots=True)
class AcquireResult:
    containers: list[dict[str, Any]] = field(default_factory=list)
    proxy: list[dict[str, str]] = field(default_factory=list)
    rejected: str | None = None
    status: int = 429  # 429 (quota, instances) or 503 (the backend could not start one)
    retry_after: int = 1


class ManagerClient:
    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base = base_url.rstrip("/")
        self.session = session

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any], str]:
        try:
            async with self.session.request(method, self.base + path, json=body) as resp:
                data = await resp.json(content_type=None)
                retry = resp.headers.get("Retry-After", "1")
                return resp.status, data if isinstance(data, dict) else {}, retry
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ManagerUnavailable(f"{method} {path}: {exc!r}") from exc

    async def register(
        self, router_id: str, url: str, holdings: list[str], incarnation: str = ""
    ) -> dict[str, Any]:
        body = {"id": router_id, "url": url, "holdings": holdings, "incarnation": incarnation}
        status, data, _ = await self._call("POST", "/v1/routers", body)
        if status != 200:
            raise ManagerUnavailable(f"register: {status} {data}")
        return data

    async def renew(self, router_id: str) -> dict[str, Any]:
        status, data, _ = await self._call("PUT", f"/v1/routers/{router_id}/lease")
        if status == 404:
            raise UnknownToManager(router_id)
        if status != 200:
            raise ManagerUnavailable(f"renew: {status} {data}")
        return data

    async def deregister(self, router_id: str) -> None:
        await self._call("DELETE", f"/v1/routers/{router_id}")

    async def acquire(
        self,
        router_id: str,
        action: ActionSpec,
        *,
        count: int,
        known: list[str],
        allow_proxy: bool,
    ) -> AcquireResult:
        body = {
            "router": router_id,
            "action": action.to_json(),
            "count": count,
            "known": known,
            "allow_proxy": allow_proxy,
        }
        status, data, retry = await self._call("POST", "/v1/acquire", body)
        if status == 404:
            raise UnknownToManager(router_id)
        if status in (429, 503):
            return AcquireResult(
                rejected=str(data.get("error", "Too many requests")),
                retry_after=int(retry) if retry.isdigit() else 1,
                status=status,
            )
        if status != 200:
            raise ManagerUnavailable(f"acquire: {status} {data}")
        return AcquireResult(containers=data.get("containers", []), proxy=data.get("proxy", []))

    async def give_back(self, router_id: str, cid: str, reason: str) -> None:
        await self._call(
            "POST", f"/v1/containers/{cid}/giveback", {"router": router_id, "reason": reason}
        )
