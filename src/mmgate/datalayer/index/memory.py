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
from collections.abc import Hashable, Iterable, Sequence
from itertools import chain
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)

PRESENT = 1
"""The mask of an entry that is simply held (the approximate indexes)."""
ALL = -1
"""Every bit: ``remove``/``clear`` with it drop the entries whatever holds them."""
_BEFORE: Final = object()  # the holder set "before the first key": none of a key's


class AffinityIndex(Generic[K]):
    """Each key's holders are an immutable set, replaced when they change, and keys that had one
    holder set before a change share one after it: a block chain recorded on the same endpoints
    points at a few set objects, not one per block. A lookup then walks a shared prefix run by
    run (runs of one object are told by identity) instead of testing each block's holders.
    The module is compiled with mypyc (:data:`mmgate.compiled.MODULES`): the index is read on
    every decision, and nothing patches or subclasses it."""

    def __init__(self) -> None:
        self._lru: dict[str, OrderedDict[K, int]] = {}
        self._holders: dict[K, frozenset[str]] = {}

    def add(self, endpoint: str, keys: Iterable[K], capacity: int | None = None, mask: int = PRESENT) -> None:
        """Record that ``endpoint`` now holds ``keys`` (most recent last) in the places of ``mask``;
        with a ``capacity``, evict its least recently added keys beyond it (``None``: unbounded)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            lru = self._lru[endpoint] = OrderedDict()
        holders = self._holders
        alone = frozenset((endpoint,))
        was: frozenset[str] | None = None  # the last holder set extended, and what it became
        became = alone
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
                holders[key] = alone
            else:
                if owners is not was:
                    was, became = owners, owners | alone
                holders[key] = became
        if capacity is not None:
            excess = len(lru) - max(capacity, 0)
            if excess > 0:
                self._drop([lru.popitem(last=False)[0] for _ in range(excess)], endpoint)

    def remove(self, endpoint: str, keys: Iterable[K], mask: int = ALL) -> None:
        """``endpoint`` no longer holds ``keys`` in the places of ``mask`` (a key held elsewhere on
        the endpoint stays)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            return
        gone: list[K] = []
        for key in keys:
            old = lru.get(key)
            if old is None:
                continue
            left = old & ~mask
            if left:
                lru[key] = left
            else:
                del lru[key]
                gone.append(key)
        self._drop(gone, endpoint)

    def clear(self, endpoint: str, mask: int = ALL) -> None:
        """Drop the places of ``mask`` from every entry of ``endpoint`` (``ALL``: forget it)."""
        if mask == ALL:
            self.remove_endpoint(endpoint)
            return
        lru = self._lru.get(endpoint)
        if lru is not None:
            self.remove(endpoint, [k for k, m in lru.items() if m & mask], mask)

    def _drop(self, keys: Iterable[K], endpoint: str) -> None:
        """``endpoint`` no longer holds ``keys`` (already gone from its LRU)."""
        holders = self._holders
        alone = frozenset((endpoint,))
        was: frozenset[str] | None = None  # as in add: keys sharing a holder set keep sharing
        became = alone
        for key in keys:
            owners = holders.get(key)
            if owners is None:
                continue
            if owners is not was:
                was, became = owners, owners - alone
            if became:
                holders[key] = became
            else:
                del holders[key]

    def holders(self, key: K) -> frozenset[str] | None:
        return self._holders.get(key)

    def holds(self, endpoint: str, key: K) -> bool:
        lru = self._lru.get(endpoint)
        return lru is not None and key in lru

    def mask_of(self, endpoint: str, key: K) -> int:
        """The places on ``endpoint`` holding ``key`` (0 when none)."""
        lru = self._lru.get(endpoint)
        return 0 if lru is None else lru.get(key, 0)

    def longest_prefix(self, keys: Sequence[K], more: Iterable[K] = ()) -> dict[str, int]:
        """For each endpoint, how many of ``keys`` then ``more`` it holds consecutively from the
        first.

        Keys are read in order, ``more`` no further than the first key nobody still matching
        holds, so a lazy iterator (the approximate producer's block chain after the blocks it
        knew) computes no key the answer does not need. Consecutive blocks of a chain recorded
        together share one holder set object, so a key whose set is the previous key's (an
        identity test) only counts; the endpoints still matching are narrowed when the set
        changes. (A plain loop: this module is compiled with mypyc, where it costs a dict read
        and a pointer comparison a key; the ``itemgetter`` / ``groupby`` pipeline it replaces,
        same answer and same order, was ~38k instructions for a 43-block prefix.)"""
        holders = self._holders
        matched: dict[str, int] = {}
        alive: frozenset[str] | None = None  # endpoints holding every key so far
        last: object = _BEFORE  # the previous key's holder set (None: nobody's)
        depth = 0  # keys so far
        for key in chain(keys, more):
            owners = holders.get(key)
            if owners is not last:
                if owners is None:
                    break
                if alive is None:
                    alive = owners
                elif not alive <= owners:
                    left = alive & owners
                    for ep in alive - left:
                        matched[ep] = depth
                    if not left:
                        return matched
                    alive = left
                last = owners
            depth += 1
        for ep in alive or ():
            matched[ep] = depth
        return matched

    def remove_endpoint(self, endpoint: str) -> None:
        lru = self._lru.pop(endpoint, None)
        if lru is not None:
            self._drop(lru, endpoint)

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
