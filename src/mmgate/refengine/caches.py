"""The engine's three caches: one least-recently-used store, sized three ways.

* processor cache: preprocessed pixel tensors by media identity, sized in bytes (vLLM's
  ``--mm-processor-cache-gb`` counts the tensors' ``nbytes``);
* encoder cache: vision-tower outputs by media identity, sized in embeddings (tokens), as vLLM's
  ``EncoderCacheManager`` counts them;
* prefix cache: one full block of keys and values per block key, sized in blocks.

An item larger than the whole capacity is not stored (vLLM serves such an item uncached), so one
huge image never flushes everything else. Eviction hands back the keys it dropped, which the prefix
cache turns into KV ``BlockRemoved`` events. Capacity 0 turns a cache off. Hit and query counters
live with the engine, which knows what a query is (items for media, tokens for the prefix).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LruCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """``capacity`` units of values, each costing ``size(value)`` units; least recently used
    goes first."""

    __slots__ = ("_entries", "_size", "_used", "capacity")

    def __init__(self, capacity: int, size: Callable[[V], int]) -> None:
        self.capacity = max(0, capacity)
        self._size = size
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._used = 0

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    @property
    def used(self) -> int:
        """Units held now."""
        return self._used

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value, now most recently used; None when absent."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V) -> list[K]:
        """Store ``value`` (replacing an entry under ``key``); returns the keys evicted for room.
        A value larger than the capacity is not stored."""
        cost = self._size(value)
        if cost > self.capacity:
            return []
        old = self._entries.pop(key, None)
        if old is not None:
            self._used -= old[1]
        self._entries[key] = (value, cost)
        self._used += cost
        evicted: list[K] = []
        while self._used > self.capacity:
            dropped, (_, n) = self._entries.popitem(last=False)
            self._used -= n
            evicted.append(dropped)
        return evicted
