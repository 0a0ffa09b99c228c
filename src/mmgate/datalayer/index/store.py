"""The interface every affinity index backend offers, and how plugins obtain one.

Plugins never build their index themselves: they ask the scheduler's :class:`IndexProvider` for one
by namespace (``"approx-prefix-cache-producer/<instance name>"``; keys are block hashes or media
identities), so the same configuration gives
in-memory indexes in the discrete-event benchmark and in a single gateway, and Redis-mirrored ones
when ``mmgate.sharedIndex`` is set (several replicas or ``--workers N`` then share one view).

The methods are synchronous and never wait on I/O: the scheduler calls them on the request path. A
shared backend answers from its local view and propagates changes in the background.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from mmgate.datalayer.index.memory import ALL, PRESENT, AffinityIndex

K = TypeVar("K", bound=Hashable)


class AffinityStore(Protocol[K]):
    """Block key (or media identity) → endpoints, with per-endpoint LRU bounds."""

    def add(
        self, endpoint: str, keys: Iterable[K], capacity: int | None = None, mask: int = PRESENT
    ) -> None: ...
    def remove(self, endpoint: str, keys: Iterable[K], mask: int = ALL) -> None: ...
    def clear(self, endpoint: str, mask: int = ALL) -> None: ...
    def remove_endpoint(self, endpoint: str) -> None: ...
    def holders(self, key: K) -> frozenset[str] | None: ...
    def holds(self, endpoint: str, key: K) -> bool: ...
    def mask_of(self, endpoint: str, key: K) -> int: ...
    def longest_prefix(self, keys: Sequence[K], more: Iterable[K] = ()) -> dict[str, int]: ...
    def keys_of(self, endpoint: str) -> list[K]: ...
    def held_keys(self) -> list[K]: ...
    def endpoints(self) -> list[str]: ...
    def size(self, endpoint: str) -> int: ...
    def __len__(self) -> int: ...


class IndexProvider(Protocol):
    """Hands out one index per namespace (keys: hashable values msgpack can carry, e.g. int, str)."""

    def index(self, namespace: str) -> AffinityStore[Any]: ...


class MemoryIndexes:
    """Process-local indexes: the default, and what the discrete-event benchmark uses."""

    def index(self, namespace: str) -> AffinityStore[Any]:
        return AffinityIndex()
