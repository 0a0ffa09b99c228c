"""``approx-prefix-cache-producer``: which endpoints probably hold this request's prefix in KV cache.

The pseudo-token stream from ``token-producer`` is cut into blocks (the last may be partial) and
chained as llm-d's ``prefixhash`` does — each block's hash covers its tokens and the previous
block's hash, starting from a seed of the model and cache salt — with one hash call per block:
seed = xxh3_64(model ‖ cache_salt), and each block's hash is xxh3_64 of its little-endian uint32
tokens, seeded with the previous hash. (llm-d's own chain is xxh64(le64(xxh64(block)) ‖
le64(previous)), two calls and a pack per block; these hashes never leave mmgate — the gateway's
own index, shared between replicas through Redis (``mmgate.sharedIndex``), is their only reader,
so replicas sharing one index must run the same mmgate release.) Media items are runs of an
identity-derived token inside that stream, so a block holding part of an image hashes that
image's content identity, and everything after it chains on it.

The lookup reads the chain block by block and stops at the first block no candidate holds: the
blocks after it decide nothing, so they are hashed only when ``pre_request`` records the whole
chain, off the decision path (:meth:`PrefixMatch.all_hashes`). The blocks before the prompt's
trailing text (system prompt and media, what the requests of one group share) are looked up by
content among the last 1024 such prefixes and not hashed again when found
(:mod:`mmgate.scheduling.plugins._block_chain`).

After a decision, ``pre_request`` records the hashes as held by the primary profile's first target
(and the ``prefill`` profile's, if any), in that endpoint's own LRU. The gateway never sees the
engine's cache, hence "approximate"; the LRU capacity follows the endpoint's KV size when
``autoTune`` can read ``vllm:cache_config_info``.

Differences from llm-d, on purpose: a match counts only *consecutive* blocks from the first (llm-d
counts every block an endpoint holds until no endpoint holds one), the block hash is the one-call
chain above, and the auto-tuned capacity is rescaled to the routing block size
(``num_gpu_blocks × engine block size ÷ routing block size``) where llm-d uses the engine's block
count as is, which overstates capacity 4× for 16-token engine blocks hashed at 64.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from mmgate.datalayer.index.store import AffinityStore
from mmgate.scheduling.contracts import EndpointAware, PluginHandle, Producer
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT, PrefixMatch, TokenizedPrompt
from mmgate.scheduling.lifecycle import PreRequest
from mmgate.scheduling.plugins._block_chain import ChainKey, PrefixChains, block_count, chain
from mmgate.scheduling.plugins._schemas import (
    DEFAULT_BLOCK_SIZE_TOKENS,
    DEFAULT_LRU_CAPACITY_PER_SERVER,
    ApproxPrefixParams,
)
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest, SchedulingResult

PREFIX_CHAINS = 1024  # stream prefixes whose block hashes are remembered (a few KB each)
PREFILL_PROFILE = "prefill"

_pack1 = struct.Struct("<I").pack


def _le_bytes(token_ids: Sequence[int]) -> bytes:
    buf = array("I", token_ids)
    if sys.byteorder != "little":
        buf.byteswap()
    return buf.tobytes()


def stream_bytes(tp: TokenizedPrompt) -> bytes:
    """The stream as little-endian uint32s. A media span is one id repeated (the
    ``mmgate.tokens`` sequence contract), so it is written by bytes repetition instead of
    converting thousands of equal ints one by one. The token producer usually built it already."""
    if tp.stream is not None:
        return tp.stream
    ids = tp.token_ids
    parts: list[bytes] = []
    pos = 0
    for item in sorted(tp.media, key=lambda m: m.offset):
        if item.offset < pos or item.length <= 0:
            continue
        if item.offset > pos:
            parts.append(_le_bytes(ids[pos : item.offset]))
        parts.append(_pack1(ids[item.offset]) * item.length)
        pos = item.offset + item.length
    if pos < len(ids):
        parts.append(_le_bytes(ids[pos:]))
    return b"".join(parts)


def block_hashes(
    stream: bytes | Sequence[int], block_size: int, seed_text: str, max_blocks: int
) -> list[int]:
    """The chained block hashes of a token stream (ints, or their little-endian uint32 bytes)."""
    data = stream if isinstance(stream, bytes) else _le_bytes(stream)
    out: list[int] = []
    for _ in chain(data, block_size, seed_text, max_blocks, out):
        pass
    return out


class ApproxPrefixCacheProducer(Producer[ApproxPrefixParams], PreRequest, EndpointAware):
    type_name = "approx-prefix-cache-producer"

    def __init__(self, name: str, params: ApproxPrefixParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if params.blockSize > 0 and params.blockSizeTokens == DEFAULT_BLOCK_SIZE_TOKENS:
            params.blockSizeTokens = params.blockSize
        if not params.autoTune and params.blockSizeTokens <= 0:
            raise ValueError("blockSizeTokens must be > 0 when autoTune is disabled")
        if params.maxPrefixTokensToMatch < 0 or params.maxPrefixBlocksToMatch < 0:
            raise ValueError("maxPrefixTokensToMatch and maxPrefixBlocksToMatch must be >= 0")
        if params.minBlockSizeTokens <= 0:
            raise ValueError("minBlockSizeTokens must be > 0")
        self.index: AffinityStore[int] = handle.indexes.index(f"{self.type_name}/{name}")
        self.chains = PrefixChains(PREFIX_CHAINS)
        self._keys = self.own_keys(PREFIX_MATCH)
        self._key_names = [key.name for key in self._keys]
        self._new_prefix: DataKey[ChainKey] = DataKey(f"approx-prefix-chain@{name}")

    def produces(self) -> tuple[DataKey[Any], ...]:
        return self._keys

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT,)

    def block_size(self, endpoints: Sequence[EndpointState]) -> int:
        p = self.params
        size = p.blockSizeTokens
        if p.autoTune:
            for ep in endpoints:
                m = ep.metrics
                if m is not None and m.block_size:
                    size = m.block_size
                    break
        return max(size, p.minBlockSizeTokens)

    def max_blocks(self, block_size: int) -> int:
        p = self.params
        if p.maxPrefixTokensToMatch > 0:
            return p.maxPrefixTokensToMatch // block_size
        return p.maxPrefixBlocksToMatch or sys.maxsize

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        # The data bag read and written directly (the value's type checked): compiled, a call of
        # the request's get / put is a call into Python code, each a measurable share of produce.
        bag = request.data
        tp = bag.get(TOKENIZED_PROMPT.name)
        if not isinstance(tp, TokenizedPrompt):
            tp = None
        size = self.block_size(endpoints)
        if tp is None:
            info = PrefixMatch(size, 0, 0, [], {})
        else:
            seed = request.view.model + (tp.cache_salt or "")
            data = tp.stream if tp.stream is not None else stream_bytes(tp)
            limit = self.max_blocks(size)
            total = block_count(len(data), size, limit)
            known: tuple[int, ...] = ()
            # The whole blocks before the trailing text (what a sibling request shares): up to
            # the end of the last media item (a plain loop: the items are few).
            end = 0
            for m in tp.media:
                if m.offset + m.length > end:
                    end = m.offset + m.length
            head = end // size
            if head > total:
                head = total
            if head >= 2:
                prefix = self.chains.key(data, size, seed, head)
                known = self.chains.get(prefix) or ()
                if not known:
                    request.put(self._new_prefix, prefix)  # remembered once the chain is complete
            hashes = list(known)
            pending = chain(data, size, seed, limit, hashes, known)
            matched = self.index.longest_prefix(known, pending)
            info = PrefixMatch(size, total, len(tp.token_ids), hashes, matched, pending)
        for key in self._key_names:
            bag[key] = info

    def capacity(self, endpoint: EndpointState, block_size: int) -> int:
        p = self.params
        m = endpoint.metrics
        if p.autoTune and m is not None and m.num_gpu_blocks:
            engine_block = m.block_size or block_size
            return max(1, m.num_gpu_blocks * engine_block // block_size)
        return p.lruCapacityPerServer if p.lruCapacityPerServer > 0 else DEFAULT_LRU_CAPACITY_PER_SERVER

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        info = request.get(self._keys[-1])
        if info is None:
            return
        hashes = info.all_hashes()
        if not hashes:
            return
        new_prefix = request.get(self._new_prefix)
        if new_prefix is not None:
            self.chains.put(new_prefix, hashes)
        targets = result.targets_of(result.primary_profile)[:1]
        if result.primary_profile != PREFILL_PROFILE:
            targets += result.targets_of(PREFILL_PROFILE)[:1]
        for ep in targets:
            self.index.add(ep.name, hashes, self.capacity(ep, info.block_size))

    def remove_endpoint(self, name: str) -> None:
        self.index.remove_endpoint(name)
