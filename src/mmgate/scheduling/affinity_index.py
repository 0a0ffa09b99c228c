"""A per-endpoint LRU of keys with a reverse index, the state behind every affinity plugin.

Each endpoint gets its own bounded LRU (like llm-d's one ``golang-lru`` cache per pod), so one busy
endpoint's churn never evicts another's entries. The reverse index (key → endpoints holding it)
makes a lookup cost proportional to the request's keys, not to the fleet size: a request's block
hashes are looked up once, whatever the number of endpoints.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class AffinityIndex(Generic[K]):
    def __init__(self) -> None:
        self._lru: dict[str, OrderedDict[K, None]] = {}
        self._holders: dict[K, set[str]] = {}

    def add(self, endpoint: str, keys: Iterable[K], capacity: int) -> None:
        """Record that ``endpoint`` now holds ``keys`` (most recent last), evicting its oldest."""
        lru = self._lru.get(endpoint)
        if lru is None:
            lru = self._lru[endpoint] = OrderedDict()
        holders = self._holders
        for key in keys:
            if key in lru:
                lru.move_to_end(key)
                continue
            lru[key] = None
            owners = holders.get(key)
            if owners is None:
                holders[key] = {endpoint}
            else:
                owners.add(endpoint)
        while len(lru) > max(capacity, 0):
            old, _ = lru.popitem(last=False)
            self._drop(old, endpoint)

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

    def longest_prefix(self, keys: Sequence[K]) -> dict[str, int]:
        """For each endpoint, how many of ``keys`` it holds consecutively from the first."""
        matched: dict[str, int] = {}
        holders = self._holders
        for i, key in enumerate(keys):
            owners = holders.get(key)
            if not owners:
                break
            advanced = False
            for ep in owners:
                if matched.get(ep, 0) == i:
                    matched[ep] = i + 1
                    advanced = True
            if not advanced:
                break
        return matched

    def remove_endpoint(self, endpoint: str) -> None:
        lru = self._lru.pop(endpoint, None)
        if lru is not None:
            for key in lru:
                self._drop(key, endpoint)

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
