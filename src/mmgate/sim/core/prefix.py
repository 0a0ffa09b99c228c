"""The engine's prefix cache: each request's chained block keys over the KV block pool.

Keys are vLLM's (:mod:`mmgate.vllm.blocks`): a request's prompt blocks are hashed once, at
admission; blocks holding generated tokens as they fill. Caching a run of full blocks records
one ``BlockStored`` event carrying the blocks' tokens and their extra keys in the event form.
"""

from __future__ import annotations

from mmgate.modelserver.events import BlockStored
from mmgate.sim.core.kv import BlockPool
from mmgate.sim.core.request import RequestState
from mmgate.vllm.blocks import BlockHasher, ExtraKeys, block_extra_keys, event_extra_keys


class PrefixCache:
    """Block keys, lookups and the query/hit counters (in tokens, as vLLM counts them)."""

    __slots__ = (
        "block_size",
        "enabled",
        "hasher",
        "hits",
        "key_format",
        "output_token_id",
        "pool",
        "queries",
    )

    def __init__(self, pool: BlockPool, hasher: BlockHasher, enabled: bool, output_token_id: int) -> None:
        self.pool = pool
        self.hasher = hasher
        self.block_size = hasher.block_size
        self.key_format = hasher.key_format
        self.enabled = enabled
        self.output_token_id = output_token_id
        self.queries = 0
        self.hits = 0

    def hash_prompt(self, r: RequestState) -> None:
        """Keys of every full prompt block, at admission (one tuple and one hash per block)."""
        if self.enabled:
            r.hashes = self.hasher.block_hashes(r.prompt, r.spans, r.salt, r.lora)

    def lookup(self, r: RequestState) -> list[int]:
        """Blocks of the longest cached prefix of ``r``'s sequence (prompt and tokens generated
        before a preemption); at most ``total - 1`` tokens can hit, as vLLM leaves one to compute."""
        if not self.enabled:
            return []
        bs = self.block_size
        total = r.total
        self.hash_upto(r, total // bs)
        return self.pool.lookup(r.hashes, (total - 1) // bs)

    def count(self, queried: int, hit: int) -> None:
        if self.enabled:
            self.queries += queried
            self.hits += hit

    def cache_computed(self, r: RequestState, computed: int) -> None:
        """Cache the full prompt blocks the first ``computed`` tokens fill."""
        if self.enabled:
            self._cache_full_blocks(r, min(computed // self.block_size, len(r.hashes)))

    def cache_filled(self, r: RequestState, n_full: int) -> None:
        """A decoder just filled its ``n_full``-th block: key and cache it."""
        if self.enabled:
            self.hash_upto(r, n_full)
            self._cache_full_blocks(r, n_full)

    def hash_upto(self, r: RequestState, n_blocks: int) -> None:
        """Extend ``r.hashes`` to ``n_blocks`` keys (blocks holding generated tokens)."""
        while len(r.hashes) < n_blocks:
            i = len(r.hashes)
            parent = r.hashes[-1] if r.hashes else None
            r.hashes.append(self.hasher.hash_block(parent, self._block_tokens(r, i), self._extra_keys(r, i)))

    def _block_tokens(self, r: RequestState, i: int) -> tuple[int, ...]:
        bs = self.block_size
        start = i * bs
        end = start + bs
        p = r.prompt_len
        out = self.output_token_id
        if end <= p:
            return tuple(r.prompt[start:end])
        if start >= p:
            return (out,) * bs
        return tuple(r.prompt[start:p]) + (out,) * (end - p)

    def _extra_keys(self, r: RequestState, i: int) -> ExtraKeys:
        bs = self.block_size
        if r.lora is None and (i > 0 or not r.salt) and (not r.items or i * bs >= r.items_end):
            return None
        return block_extra_keys(i * bs, (i + 1) * bs, r.spans, r.salt, lora=r.lora, fmt=self.key_format)[0]

    def _cache_full_blocks(self, r: RequestState, n_full: int) -> None:
        first = r.n_cached_blocks
        if n_full <= first:
            return
        pool = self.pool
        pool.cache_range(r.blocks, r.hashes, first, n_full)
        r.n_cached_blocks = n_full
        if not pool.records_events:
            return
        token_ids: list[int] = []
        extras: list[list[object] | None] = []
        for i in range(first, n_full):
            token_ids.extend(self._block_tokens(r, i))
            extras.append(event_extra_keys(self._extra_keys(r, i), self.key_format))
        parent = r.hashes[first - 1] if first > 0 else None
        lora_name = None if r.lora is None else r.lora.name
        event = BlockStored(
            r.hashes[first:n_full], parent, token_ids, self.block_size, extras, lora_name=lora_name
        )
        pool.record(event)
