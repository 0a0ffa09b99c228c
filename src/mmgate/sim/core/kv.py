"""KV block pool with vLLM's prefix cache: ref-counted blocks, one free queue that is also the
LRU eviction order, and a key → block map of cached full blocks.

Like vLLM's ``BlockPool``: block 0 is the null block (never handed out); freed blocks go to
the tail of the free queue (a request's blocks in reverse, so its last block is evicted first);
allocation pops the head and evicts the key the block still carried. A key already cached by
another block (two requests prefilling the same prefix at once) leaves the second block
uncached; vLLM would keep both copies, which changes no hit and no index.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from mmgate.modelserver.events import AllBlocksCleared, BlockRemoved, KVEvent
from mmgate.vllm.blocks import BlockHash


class BlockPool:
    """vLLM's ``BlockPool``: the KV blocks, their free/LRU queue and the cached-key index."""

    __slots__ = ("block_of", "events", "free", "hash_of", "num_blocks", "ref")

    def __init__(self, num_blocks: int, record_events: bool) -> None:
        if num_blocks < 2:
            raise ValueError("the KV cache needs at least 2 blocks (one is vLLM's null block)")
        self.num_blocks = num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self.ref = [0] * num_blocks
        self.hash_of: list[BlockHash | None] = [None] * num_blocks
        self.block_of: dict[BlockHash, int] = {}
        self.events: list[KVEvent] | None = [] if record_events else None

    def num_free(self) -> int:
        return len(self.free)

    def usage(self) -> float:
        return 1.0 - len(self.free) / (self.num_blocks - 1)

    def lookup(self, hashes: Sequence[BlockHash], max_blocks: int) -> list[int]:
        """Blocks of the longest cached prefix of ``hashes`` (at most ``max_blocks``)."""
        hit: list[int] = []
        block_of = self.block_of
        for h in hashes[:max_blocks]:
            b = block_of.get(h)
            if b is None:
                break
            hit.append(b)
        return hit

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` sit in the free queue (touching them takes them out)."""
        ref = self.ref
        return sum(1 for b in blocks if ref[b] == 0)

    def touch(self, blocks: Sequence[int]) -> None:
        ref = self.ref
        free = self.free
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Pop ``n`` blocks off the free queue's head (caller checked ``num_free``)."""
        out: list[int] = []
        popitem = self.free.popitem
        ref = self.ref
        hash_of = self.hash_of
        for _ in range(n):
            b = popitem(last=False)[0]
            h = hash_of[b]
            if h is not None:
                hash_of[b] = None
                if self.block_of.get(h) == b:
                    del self.block_of[h]
                if self.events is not None:
                    self.events.append(BlockRemoved([h]))
            ref[b] = 1
            out.append(b)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; unreferenced ones join the free queue's tail."""
        ref = self.ref
        free = self.free
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def is_cached(self, h: BlockHash) -> bool:
        return h in self.block_of

    def cache_range(self, blocks: Sequence[int], hashes: Sequence[BlockHash], first: int, end: int) -> None:
        """Register full blocks ``first..end-1`` under their keys; a key another block already
        holds (or a block already keyed) is left as it is."""
        block_of = self.block_of
        hash_of = self.hash_of
        for i in range(first, end):
            h = hashes[i]
            b = blocks[i]
            if h not in block_of and hash_of[b] is None:
                block_of[h] = b
                hash_of[b] = h

    @property
    def records_events(self) -> bool:
        return self.events is not None

    def record(self, event: KVEvent) -> None:
        """Queue a KV event for this step's output (only when events are recorded)."""
        if self.events is not None:
            self.events.append(event)

    def reset(self) -> bool:
        """vLLM's ``reset_prefix_cache``: only when no block is in use."""
        if len(self.free) != self.num_blocks - 1:
            return False
        self.block_of.clear()
        self.hash_of = [None] * self.num_blocks
        if self.events is not None:
            self.events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVEvent]:
        if not self.events:
            return []
        out = self.events
        self.events = []
        return out
