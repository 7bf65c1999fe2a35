"""Concurrency limits from shares (reference table 2.1) and max seats (Test_GetMaxSeats)."""

from __future__ import annotations

import pytest

from gateway.apfconfig import bootstrap
from gateway.flowcontrol.controller import FlowController, SimpleObjectSet
from gateway.flowcontrol.level import PriorityLevel
from gateway.testing import FakeEventClock
from tests.flowcontrol.builders import queuing_level

# name: (NominalCL, LendableCL, MinCL, MaxCL, initial CurrentCL, maxSeats)
DEFAULT_LIMITS = {
    "exempt": (0, 0, 0, 600, 0, 0),
    "catch-all": (13, 0, 13, 613, 13, 0),
    "system": (74, 24, 50, 674, 62, 12),
    "node-high": (98, 25, 73, 698, 86, 15),
    "leader-election": (25, 0, 25, 625, 25, 4),
    "workload-high": (98, 49, 49, 698, 74, 15),
    "workload-low": (245, 221, 24, 845, 135, 37),
    "global-default": (49, 25, 24, 649, 37, 8),
}


@pytest.fixture(scope="module")
def controller() -> FlowController:
    return FlowController(
        clock=FakeEventClock(), config=bootstrap.defaults(), mandatory=bootstrap.mandatory()
    )


def test_server_limit_defaults_to_400_plus_200(controller: FlowController) -> None:
    assert controller.server_cl == 600


@pytest.mark.parametrize("name", sorted(DEFAULT_LIMITS))
def test_default_limits_at_creation(name: str) -> None:
    """A level's limits when first created: CurrentCL = NominalCL - floor(LendableCL / 2)."""
    config = next(pl for pl in bootstrap.defaults().priority_levels if pl.name == name)
    level = PriorityLevel(config, FakeEventClock(), estimated_service=0.003)
    level.set_limits(600, 245)
    got = (
        level.nominal_cl,
        level.lendable_cl,
        level.min_cl,
        level.max_cl,
        level.current_cl,
        level.max_seats,
    )
    assert got == DEFAULT_LIMITS[name]
    assert level.qs.concurrency_limit == level.current_cl


@pytest.mark.parametrize("name", sorted(DEFAULT_LIMITS))
def test_controller_limits(controller: FlowController, name: str) -> None:
    nominal, lendable, low, high, _, max_seats = DEFAULT_LIMITS[name]
    level = controller.levels[name]
    assert (level.nominal_cl, level.lendable_cl, level.min_cl, level.max_cl) == (
        nominal,
        lendable,
        low,
        high,
    )
    assert level.max_seats == controller.max_seats(name) == max_seats
    # The digest ends with a borrowing pass; whatever it decides reaches the queue set.
    assert level.current_cl is not None and low <= level.current_cl <= high
    assert level.qs.concurrency_limit == level.current_cl
    assert controller.max_seats("no-such-level") == 0


def test_nominal_sum_exceeds_server_limit_because_of_ceil(controller: FlowController) -> None:
    assert sum(level.nominal_cl for level in controller.levels.values()) == 602
    assert set(controller.levels) == set(DEFAULT_LIMITS)


def test_two_level_borrowing_setup() -> None:
    """Kubernetes' TestBorrowing: ServerCL 24, two levels of 100 shares plus the imagined
    mandatory ones (exempt 0, catch-all 5): each gets ceil(24 * 100 / 205) = 12."""
    config = SimpleObjectSet(
        (), (queuing_level("pl0", 100, queues=10, hand_size=2), queuing_level("pl1", 100))
    )
    c = FlowController(
        clock=FakeEventClock(),
        server_concurrency_limit=24,
        config=config,
        mandatory=bootstrap.mandatory(),
    )
    assert c.levels["pl0"].nominal_cl == c.levels["pl1"].nominal_cl == 12
    assert c.levels["catch-all"].nominal_cl == 1


def test_server_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        FlowController(
            clock=FakeEventClock(),
            server_concurrency_limit=0,
            config=bootstrap.defaults(),
            mandatory=bootstrap.mandatory(),
        )


@pytest.mark.parametrize(
    ("nominal", "hand", "max_seats"),
    [
        (5, 6, 1),
        (10, 6, 1),
        (15, 6, 2),
        (20, 6, 3),
        (35, 6, 5),
        (100, 6, 15),
        (200, 6, 30),
        (10, 1, 2),
        # Kubernetes also has (100, 20) -> 5, a pure-function case: no valid level has hand 20
        # (at least 87 bits of entropy); the same min() branch with a valid hand:
        (100, 10, 10),
        (100, 7, 14),
    ],
)
def test_get_max_seats(nominal: int, hand: int, max_seats: int) -> None:
    config = queuing_level("pl", 7, queues=max(hand, 8), hand_size=hand)  # entropy <= 60 bits
    level = PriorityLevel(config, FakeEventClock(), estimated_service=0.003)
    level.set_limits(nominal, 7)  # nominal = ceil(nominal * 7 / 7)
    assert level.nominal_cl == nominal
    assert level.max_seats == max_seats
