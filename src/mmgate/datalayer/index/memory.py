"""The in-memory affinity index: a per-endpoint LRU of keys with a reverse index.

Every affinity signal lives in one of these: the approximate prefix index and the encoder-cache
index (learned from the gateway's own decisions), and the precise block index (fed by the pods' KV
events). Each endpoint gets its own bounded LRU (like llm-d's one ``golang-lru`` cache per pod), so
one busy endpoint's churn never evicts another's entries. The reverse index (key → endpoints holding
it) makes a lookup cost proportional to the request's keys, not to the fleet size.

An entry carries a *presence mask*: the bits of the places on the endpoint that hold the key. The
approximate indexes only ever use bit 1 (held or not); the KV-event index gives each (data-parallel
rank, memory tier) its own bit, so a block evicted from the GPU but still offloaded to CPU, or
dropped by one rank but kept by another, stays held. A key is held while any bit is set.

Nothing here does I/O: the scheduler reads it on the request path. A shared backend
(:mod:`mmgate.datalayer.index.redis_mirror`) keeps one of these as its local view.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

PRESENT = 1
"""The mask of an entry that is simply held (the approximate indexes)."""
ALL = -1
"""Every bit: ``remove``/``clear`` with it drop the entries whatever holds them."""


class AffinityIndex(Generic[K]):
    def __init__(self) -> None:
        self._lru: dict[str, OrderedDict[K, int]] = {}
        self._holders: dict[K, set[str]] = {}

    def add(self, endpoint: str, keys: Iterable[K], capacity: int | None = None, mask: int = PRESENT) -> None:
        """Record that ``endpoint`` now holds ``keys`` (most recent last) in the places of ``mask``;
        with a ``capacity``, evict its least recently added keys beyond it (``None``: unbounded)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            lru = self._lru[endpoint] = OrderedDict()
        holders = self._holders
        for key in keys:
            old = lru.get(key)
            if old is not None:
                lru.move_to_end(key)
                if old | mask != old:
                    lru[key] = old | mask
                continue
            lru[key] = mask
            owners = holders.get(key)
            if owners is None:
                holders[key] = {endpoint}
            else:
                owners.add(endpoint)
        if capacity is not None:
            while len(lru) > max(capacity, 0):
                old_key, _ = lru.popitem(last=False)
                self._drop(old_key, endpoint)

    def remove(self, endpoint: str, keys: Iterable[K], mask: int = ALL) -> None:
        """``endpoint`` no longer holds ``keys`` in the places of ``mask`` (a key held elsewhere on
        the endpoint stays)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            return
        for key in keys:
            old = lru.get(key)
            if old is None:
                continue
            left = old & ~mask
            if left:
                lru[key] = left
            else:
                del lru[key]
                self._drop(key, endpoint)

    def clear(self, endpoint: str, mask: int = ALL) -> None:
        """Drop the places of ``mask`` from every entry of ``endpoint`` (``ALL``: forget it)."""
        if mask == ALL:
            self.remove_endpoint(endpoint)
            return
        lru = self._lru.get(endpoint)
        if lru is not None:
            self.remove(endpoint, [k for k, m in lru.items() if m & mask], mask)

    def _drop(self, key: K, endpoint: str) -> None:
        owners = self._holders.get(key)
        if owners is not None:
            owners.discard(endpoint)
            if not owners:
                del self._holders[key]

    def holders(self, key: K) -> set[str] | None:
        return self._holders.get(key)

    def holds(self, endpoint: str, key: K) -> bool:
        lru = self._lru.get(endpoint)
        return lru is not None and key in lru

    def mask_of(self, endpoint: str, key: K) -> int:
        """The places on ``endpoint`` holding ``key`` (0 when none)."""
        lru = self._lru.get(endpoint)
        return 0 if lru is None else lru.get(key, 0)

    def longest_prefix(self, keys: Iterable[K]) -> dict[str, int]:
        """For each endpoint, how many of ``keys`` it holds consecutively from the first.

        The endpoints still matching are carried as a set and narrowed only when a key is held
        by fewer of them (usually every holder of a shared prefix holds all of it, so a block
        costs one subset test, not a loop over its holders). ``keys`` is read in order and no
        further than the first key nobody still matching holds, so a lazy iterator (the
        approximate producer's block chain) computes no key the answer does not need."""
        holders = self._holders
        it = iter(keys)
        first = next(it, None)  # keys are hashes or identities, never None
        alive = None if first is None else holders.get(first)
        if not alive:
            return {}
        matched: dict[str, int] = {}
        depth = 1  # keys matched so far by every endpoint in ``alive``
        for key in it:
            owners = holders.get(key)
            if not owners:
                break
            if alive <= owners:
                depth += 1
                continue
            left = alive & owners
            for ep in alive - left:
                matched[ep] = depth
            if not left:
                return matched
            alive = left
            depth += 1
        for ep in alive:
            matched[ep] = depth
        return matched

    def remove_endpoint(self, endpoint: str) -> None:
        lru = self._lru.pop(endpoint, None)
        if lru is not None:
            for key in lru:
                self._drop(key, endpoint)

    def keys_of(self, endpoint: str) -> list[K]:
        """The keys ``endpoint`` holds, least recently added first."""
        lru = self._lru.get(endpoint)
        return [] if lru is None else list(lru)

    def held_keys(self) -> list[K]:
        """Every key some endpoint holds."""
        return list(self._holders)

    def endpoints(self) -> list[str]:
        return list(self._lru)

    def size(self, endpoint: str) -> int:
        lru = self._lru.get(endpoint)
        return 0 if lru is None else len(lru)

    def __len__(self) -> int:
        """Distinct keys held anywhere."""
        return len(self._holders)
