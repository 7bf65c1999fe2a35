"""``LeaseStore`` over the Kubernetes API: one ``coordination.k8s.io/v1`` Lease by name."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from gateway.manager.backends.k8s.api import KubeApi, KubeError
from gateway.manager.leader import Conflict, LeaseRecord


def _micro(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


class KubeLeaseStore:
    def __init__(self, api: KubeApi, name: str, labels: dict[str, str] | None = None) -> None:
        self.api = api
        self.name = name
        self.labels = labels or {}

    def body(self, record: LeaseRecord) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": record.holder,
            "leaseDurationSeconds": record.duration_seconds,
            "leaseTransitions": record.transitions,
        }
        for key, value in (("acquireTime", record.acquire_time), ("renewTime", record.renew_time)):
            if value is not None:
                spec[key] = _micro(value)
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.api.namespace}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if record.version is not None:
            metadata["resourceVersion"] = record.version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    @staticmethod
    def record(obj: dict[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=_epoch(spec.get("acquireTime")),
            renew_time=_epoch(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            version=obj.get("metadata", {}).get("resourceVersion"),
        )

    async def get(self) -> LeaseRecord | None:
        obj = await self.api.get_lease(self.name)
        return None if obj is None else self.record(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        try:
            return self.record(await self.api.create_lease(self.body(record)))
        except KubeError as exc:
            if exc.status == 409:
                raise Conflict(str(exc)) from exc
            raise

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        try:
            return self.record(await self.api.update_lease(self.body(record)))
        except KubeError as exc:
            if exc.status == 409:
                raise Conflict(str(exc)) from exc
            raise
