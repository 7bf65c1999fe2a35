"""Shuffle sharding (Kubernetes' shufflesharding_test.go): entropy, dealer checks, hands."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.flowcontrol.shufflesharding import (
    MAX_DECK_SIZE,
    Dealer,
    DealerError,
    required_entropy_bits,
)
from tests.support.examples import examples


@pytest.mark.parametrize(("deck", "hand", "bits"), [(1024, 6, 60), (512, 8, 72), (64, 6, 36)])
def test_required_entropy_bits(deck: int, hand: int, bits: int) -> None:
    assert required_entropy_bits(deck, hand) == bits


@pytest.mark.parametrize(
    ("deck", "hand", "message"),
    [
        (-1, -1, "deckSize -1 or handSize -1 is not positive"),
        (-1, 1, "deckSize -1 or handSize 1 is not positive"),
        (0, 1, "deckSize 0 or handSize 1 is not positive"),
        (1, 0, "deckSize 1 or handSize 0 is not positive"),
        (4, 5, "handSize 5 is greater than deckSize 4"),
        (MAX_DECK_SIZE + 1, 1, f"deckSize {MAX_DECK_SIZE + 1} is impractically large"),
        (512, 8, "required entropy bits of deckSize 512 and handSize 8 is greater than 60"),
    ],
)
def test_new_dealer_errors(deck: int, hand: int, message: str) -> None:
    with pytest.raises(DealerError) as info:
        Dealer(deck, hand)
    assert str(info.value) == message


@pytest.mark.parametrize(("deck", "hand"), [(1, 1), (1024, 6), (MAX_DECK_SIZE, 1)])
def test_new_dealer_accepts_limits(deck: int, hand: int) -> None:
    dealer = Dealer(deck, hand)
    assert (dealer.deck_size, dealer.hand_size) == (deck, hand)


def _assert_valid_hand(hand: list[int], deck: int, size: int) -> None:
    assert len(hand) == size
    assert len(set(hand)) == size, f"duplicate cards in {hand}"
    assert all(0 <= card < deck for card in hand), f"card out of range in {hand}"


@pytest.mark.parametrize(
    ("deck", "hand"), [(4, 4), (8, 8), (10, 10), (12, 12), (128, 8), (256, 7), (512, 6)]
)
def test_card_duplication(deck: int, hand: int) -> None:
    dealer = Dealer(deck, hand)
    for h in range(0, 1 << 64, (1 << 64) // 997):
        _assert_valid_hand(dealer.deal(h), deck, hand)
    for h in range(2000):
        _assert_valid_hand(dealer.deal(h), deck, hand)


@st.composite
def _deck_hand(draw: st.DrawFn) -> tuple[int, int]:
    deck = draw(st.integers(1, 1 << 16))
    max_hand = max(1, min(deck, int(60 / math.log2(deck))) if deck > 1 else 1)
    hand = draw(st.integers(1, max_hand))
    while required_entropy_bits(deck, hand) > 60:
        hand -= 1
    return deck, hand


@settings(max_examples=examples(300), deadline=None)
@given(_deck_hand(), st.integers(0, (1 << 64) - 1))
def test_hands_distinct_and_in_range(deck_hand: tuple[int, int], hash_value: int) -> None:
    deck, hand = deck_hand
    _assert_valid_hand(Dealer(deck, hand).deal(hash_value), deck, hand)


def _falling_factorial(n: int, k: int) -> int:
    return math.prod(range(n - k + 1, n + 1))


@pytest.mark.parametrize(
    ("deck", "hand", "hashes"),
    [
        # Kubernetes uses (64,3) over 2^22 hashes; the same shape at a size Python deals fast.
        (16, 3, 1 << (math.ceil(math.log2(_falling_factorial(16, 3))) + 4)),
        (20, 3, _falling_factorial(20, 3)),
        (10, 4, _falling_factorial(10, 4)),
    ],
)
def test_uniform_distribution(deck: int, hand: int, hashes: int) -> None:
    dealer = Dealer(deck, hand)
    counts = Counter(tuple(sorted(dealer.deal(h))) for h in range(hashes))
    ff = _falling_factorial(deck, hand)
    assert len(counts) == math.comb(deck, hand)  # every hand occurs
    low = math.factorial(hand) * (hashes // ff)
    high = math.factorial(hand) * -(-hashes // ff)
    assert all(low <= n <= high for n in counts.values()), (low, high, min(counts.values()))


def test_same_hash_same_hand() -> None:
    a, b = Dealer(128, 6), Dealer(128, 6)
    for h in (0, 1, 12345, 2**63 + 17, 2**64 - 1):
        assert a.deal(h) == b.deal(h) == a.deal(h)


@pytest.mark.parametrize(
    ("deck", "hand", "hash_value", "expected"),
    [
        # 100 = 4 + 8*(5 + 7*(1)): remainders [4, 5, 1]; 5 >= 4 -> 6; 1 stays.
        (8, 3, 100, [4, 6, 1]),
        # 1234 -> remainders [4, 6, 5, 1]; 6 >= 4 -> 7; 5 < 6, 5 >= 4 -> 6; 1 stays.
        (10, 4, 1234, [4, 7, 6, 1]),
        # remainders [0, 0, 0]: each later card steps over every earlier remainder.
        (5, 3, 0, [0, 1, 2]),
        # 7 = 7 % 9 -> [7]; with deck 9 and hand 1 the hand is hash % deck.
        (9, 1, 7 + 9 * 1000, [7]),
    ],
)
def test_pinned_hands(deck: int, hand: int, hash_value: int, expected: list[int]) -> None:
    assert Dealer(deck, hand).deal(hash_value) == expected
