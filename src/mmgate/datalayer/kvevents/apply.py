"""Applying decoded KV events to the block index.

Each (data-parallel rank, memory tier) of an endpoint is one bit of the entry's presence mask
(:mod:`mmgate.datalayer.index.memory`), so a block removed from the GPU but still offloaded to CPU
(``medium``), or evicted by one rank but held by another, stays held by the endpoint, and a rank's
``AllBlocksCleared`` clears only that rank. Events without a medium (older vLLM) are GPU blocks.
Hashes are kept as published (64-bit ints by default, or raw digests); the engine's hash already
chains the parent, so ``parent_block_hash`` is not needed to key a block.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from mmgate.datalayer.index.store import AffinityStore
from mmgate.vllm.kvevents import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch

TIERS = ("GPU", "CPU", "STORAGE")
_BITS_PER_RANK = len(TIERS)
_RANK_MASK = (1 << _BITS_PER_RANK) - 1
_TIER_INDEX = {name: i for i, name in enumerate(TIERS)}


def tier_bit(rank: int, medium: str | None) -> int:
    """The mask bit of ``medium`` on data-parallel ``rank`` (unknown media count as STORAGE)."""
    tier = 0 if medium is None else _TIER_INDEX.get(medium.upper(), 2)
    return 1 << (rank * _BITS_PER_RANK + tier)


def rank_mask(rank: int) -> int:
    """Every tier of one rank."""
    return _RANK_MASK << (rank * _BITS_PER_RANK)


def tiers_of(mask: int) -> set[str]:
    """The tiers a presence mask names, whatever the rank (``{"GPU", "CPU"}``)."""
    out: set[str] = set()
    rank = 0
    while mask >> (rank * _BITS_PER_RANK):
        bits = (mask >> (rank * _BITS_PER_RANK)) & _RANK_MASK
        out.update(name for i, name in enumerate(TIERS) if bits & (1 << i))
        rank += 1
    return out


@dataclass(slots=True)
class Applied:
    stored: int = 0
    removed: int = 0
    cleared: int = 0

    def __iadd__(self, other: Applied) -> Applied:
        self.stored += other.stored
        self.removed += other.removed
        self.cleared += other.cleared
        return self


def apply_batch(
    index: AffinityStore[Hashable], endpoint: str, rank: int, batch: KVEventBatch, capacity: int | None = None
) -> Applied:
    """Apply one batch's events in order; returns how many events of each kind it held. With a
    ``capacity``, the endpoint keeps at most that many blocks (least recently stored evicted)."""
    done = Applied()
    for event in batch.events:
        if isinstance(event, BlockStored):
            index.add(endpoint, event.block_hashes, capacity, tier_bit(rank, event.medium))
            done.stored += 1
        elif isinstance(event, BlockRemoved):
            index.remove(endpoint, event.block_hashes, tier_bit(rank, event.medium))
            done.removed += 1
        elif isinstance(event, AllBlocksCleared):
            index.clear(endpoint, rank_mask(rank))
            done.cleared += 1
    return done
