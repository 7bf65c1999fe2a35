"""Test doubles that ship with the library (as Kubernetes ships its fake event clock)."""

from gateway.testing.clock import FakeEventClock

__all__ = ["FakeEventClock"]
