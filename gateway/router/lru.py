"""A least-recently-used map bounded by entry count and by total size (pure, synchronous).

The router keeps two per-action tables a tenant can grow by creating actions: the action
documents it serves warm invokes from (``app.Router``, both bounds: ``--action-cache-bytes``
and ``--action-cache-entries``) and the actions it has metric series for
(``metrics.RouterMetrics``, the entry bound). Both hold the most recently used and drop the
least recently used; the caller is told what went and which bound pushed it out, so it can
count it and let go of what hangs off the key.

Sizes are whatever the caller counts (the router: a document's encoded bytes). An entry
larger than the size bound on its own is not kept at all: it is reported as evicted at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Limit = Literal["bytes", "entries"]


@dataclass(frozen=True, slots=True)
class Evicted(Generic[K]):
    key: K
    limit: Limit  # the bound that pushed it out


class Lru(Generic[K, V]):
    def __init__(self, max_entries: int, max_bytes: int | None = None) -> None:
        if max_entries < 1 or (max_bytes is not None and max_bytes < 1):
            raise ValueError("an LRU bound must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()  # oldest first
        self.bytes = 0  # total size of the entries held

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        """Keys from the least to the most recently used."""
        return iter(list(self._items))

    def get(self, key: K) -> V | None:
        """The value, now the most recently used; None if absent."""
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V, size: int = 0) -> list[Evicted[K]]:
        """Hold ``value`` under ``key`` as the most recently used (replacing what was there);
        what had to go to stay within the bounds, least recently used first (``key`` itself
        if it is larger than the size bound alone)."""
        self.pop(key)
        if self.max_bytes is not None and size > self.max_bytes:
            return [Evicted(key, "bytes")]
        self._items[key] = (value, size)
        self.bytes += size
        evicted: list[Evicted[K]] = []
        while len(self._items) > self.max_entries:
            evicted.append(Evicted(self._drop_oldest(), "entries"))
        while self.max_bytes is not None and self.bytes > self.max_bytes:
            evicted.append(Evicted(self._drop_oldest(), "bytes"))
        return evicted

    def pop(self, key: K) -> V | None:
        """Forget ``key``; its value, or None."""
        item = self._items.pop(key, None)
        if item is None:
            return None
        self.bytes -= item[1]
        return item[0]

    def _drop_oldest(self) -> K:
        key, (_, size) = self._items.popitem(last=False)
        self.bytes -= size
        return key
