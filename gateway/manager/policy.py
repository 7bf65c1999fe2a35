"""The eviction policy table (Agones ``eviction.safe``), as one pure function.

| ``eviction.safe`` | upgrade / drain                  | space (quota)   | scale-down      |
|-------------------|----------------------------------|-----------------|-----------------|
| ``Never``         | give back once idle, then remove | refuse          | refuse          |
| ``OnUpgrade``     | stop gracefully (SIGTERM, grace) | refuse          | refuse          |
| ``Always``        | stop gracefully (SIGTERM, grace) | stop gracefully | stop gracefully |

"Once idle" means the owning router stops routing to the container and the manager waits until
its in-flight activations have finished, with no deadline: a ``Never`` container is never
removed while busy. "Stop gracefully" means the router stops routing at once and the backend
sends SIGTERM, then SIGKILL after the grace period; activations still running get that long.
The router's own give-back of an idle container after the idle timeout is not a disruption and
is not governed by this table.
"""

from __future__ import annotations

import enum

from gateway.platform.actions import EvictionSafe


class Reason(enum.StrEnum):
    UPGRADE = "upgrade"  # drain: manager upgrade, node maintenance, `apf-gateway manager drain`
    SPACE = "space"  # make room under the namespace quota for another action's container
    SCALE_DOWN = "scale-down"  # reduce the number of containers


class Disruption(enum.StrEnum):
    REFUSE = "refuse"  # not allowed; the caller gets 429 (like a PodDisruptionBudget)
    WHEN_IDLE = "when-idle"  # give back after in-flight work finishes, then remove
    GRACEFUL_STOP = "graceful-stop"  # stop routing now; SIGTERM, SIGKILL after the grace


_TABLE: dict[tuple[EvictionSafe, Reason], Disruption] = {
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


def decide(safe: EvictionSafe, reason: Reason) -> Disruption:
    return _TABLE[(safe, reason)]
