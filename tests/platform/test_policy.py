"""Every cell of the eviction.safe table."""

from __future__ import annotations

import pytest

from gateway.manager.policy import Disruption, Reason, decide
from gateway.platform.actions import EvictionSafe

EXPECTED = {
    (EvictionSafe.NEVER, Reason.UPGRADE): Disruption.WHEN_IDLE,
    (EvictionSafe.NEVER, Reason.SPACE): Disruption.REFUSE,
    (EvictionSafe.NEVER, Reason.SCALE_DOWN): Disruption.REFUSE,
    (EvictionSafe.ON_UPGRADE, Reason.UPGRADE): Disruption.GRACEFUL_STOP,
    (EvictionSafe.ON_UPGRADE, Reason.SPACE): Disruption.REFUSE,
    (EvictionSafe.ON_UPGRADE, Reason.SCALE_DOWN): Disruption.REFUSE,
    (EvictionSafe.ALWAYS, Reason.UPGRADE): Disruption.GRACEFUL_STOP,
    (EvictionSafe.ALWAYS, Reason.SPACE): Disruption.GRACEFUL_STOP,
    (EvictionSafe.ALWAYS, Reason.SCALE_DOWN): Disruption.GRACEFUL_STOP,
}


@pytest.mark.parametrize(("safe", "reason"), list(EXPECTED))
def test_table_cell(safe: EvictionSafe, reason: Reason) -> None:
    assert decide(safe, reason) is EXPECTED[(safe, reason)]


def test_table_is_complete() -> None:
    assert len(EXPECTED) == len(EvictionSafe) * len(Reason)


def test_never_is_never_stopped_while_busy() -> None:
    for reason in Reason:
        assert decide(EvictionSafe.NEVER, reason) is not Disruption.GRACEFUL_STOP
