"""Shuffle sharding: deal a hand of distinct queue indexes from a flow's hash.

The same hash, deck size and hand size always give the same hand as Kubernetes'
``shufflesharding.Dealer``; the digits are the mixed-radix expansion of the hash.
"""

from __future__ import annotations

import math

MAX_HASH_BITS = 60
MAX_DECK_SIZE = 1 << 26


class DealerError(ValueError):
    pass


def required_entropy_bits(deck_size: int, hand_size: int) -> int:
    return math.ceil(math.log2(deck_size) * hand_size)


def check_dealer_params(deck_size: int, hand_size: int) -> str | None:
    """Kubernetes' ``NewDealer`` checks; returns the error message or None."""
    if deck_size <= 0 or hand_size <= 0:
        return f"deckSize {deck_size} or handSize {hand_size} is not positive"
    if hand_size > deck_size:
        return f"handSize {hand_size} is greater than deckSize {deck_size}"
    if deck_size > MAX_DECK_SIZE:
        return f"deckSize {deck_size} is impractically large"
    if required_entropy_bits(deck_size, hand_size) > MAX_HASH_BITS:
        return (
            f"required entropy bits of deckSize {deck_size} and handSize {hand_size}"
            f" is greater than {MAX_HASH_BITS}"
        )
    return None


class Dealer:
    __slots__ = ("deck_size", "hand_size")

    def __init__(self, deck_size: int, hand_size: int) -> None:
        error = check_dealer_params(deck_size, hand_size)
        if error:
            raise DealerError(error)
        self.deck_size = deck_size
        self.hand_size = hand_size

    def deal(self, hash_value: int) -> list[int]:
        """The hand, in deal order."""
        deck = self.deck_size
        remainders = []
        for i in range(self.hand_size):
            hash_value, r = divmod(hash_value, deck - i)
            remainders.append(r)
        hand = []
        for i, remainder in enumerate(remainders):
            card = remainder
            # Compare with the raw remainders of earlier cards, exactly as Kubernetes does.
            for j in range(i, 0, -1):
                if card >= remainders[j - 1]:
                    card += 1
            hand.append(card)
        return hand
