"""Metric plumbing that the end-to-end tests cannot reach cheaply: failed activation writes,
and one registry per router/manager (in-process instances never collide)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from gateway.manager.metrics import ManagerMetrics
from gateway.router.metrics import CountingStore, RouterMetrics
from gateway.store import ActivationWriter, StoreError
from gateway.testing import FakeEventClock


class FlakyStore:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.written: list[dict[str, Any]] = []

    async def put_activations(self, records: list[dict[str, Any]]) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreError("database is locked")
        self.written += records


async def test_failed_activation_writes_are_counted_and_retried() -> None:
    metrics, store = RouterMetrics(), FlakyStore(failures=2)
    counted: Any = CountingStore(store, metrics.write_failures)
    writer = ActivationWriter(counted, clock=FakeEventClock())
    record = {"activationId": "a" * 32, "namespace": "guest", "name": "x", "start": 0, "end": 0}
    writer.submit(record)
    for _ in range(2):
        with pytest.raises(StoreError):
            await writer.flush()  # not started: flush writes (and fails) inline
    await writer.flush()
    assert store.written == [record]
    assert metrics.registry.get_sample_value("apf_router_activation_write_failures_total") == 2


def test_each_instance_has_its_own_registry() -> None:
    first, second = RouterMetrics(), RouterMetrics()
    first.write_failures.inc()
    assert second.registry.get_sample_value("apf_router_activation_write_failures_total") == 0
    for registry in (ManagerMetrics().registry, ManagerMetrics().registry):
        text = generate_latest(registry).decode()
        assert "# TYPE apf_manager_evictions_total counter" in text
        assert "apf_manager_routers" in text
