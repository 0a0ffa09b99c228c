"""``precise-prefix-cache-producer``: which endpoints hold this request's prefix, from the pods' own
KV events (llm-d's name; the index is fed by :mod:`mmgate.datalayer.kvevents`).

The request's block keys are computed exactly as the engine computes them
(:class:`mmgate.vllm.blocks.BlockHasher`: vLLM's ``--prefix-caching-hash-algo``, NONE_HASH from the
seed, chained ``(parent, token ids, extra keys)`` with each media item's identity and offset, the
cache salt on the first block), over the token stream ``token-producer`` publishes, then converted
to the form events carry (the digest's last 8 bytes as an integer, vLLM's default). A lookup is one
hash per full block plus one index probe per block; there is no render or tokenize call on the
request path. The result is llm-d's ``PrefixCacheMatchInfo``, so ``prefix-cache-scorer`` and
``prefix-cache-affinity-filter`` read it with ``prefixMatchInfoProducerName:
precise-prefix-cache-producer``.

The keys match only when the gateway's token ids are the ones the engine sees: true for the
simulator (same pseudo-token stream, or the same engine-exact ids with ``mmgate sim --tokenizer``);
for a real vLLM, give ``token-producer`` the served model's folder (``tokens: [{mode: engine,
tokenizerDir: ...}]``, :mod:`mmgate.tokens.exact.modes`). Unlike the approximate producer,
nothing is recorded after a decision: the next events say what the pod really stored. llm-d's
``indexerConfig`` and ``kvEventsConfig`` are accepted so its configs load; in mmgate the
subscriber is configured under ``mmgate.kvEvents`` and the endpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from mmgate.datalayer.index.store import AffinityStore
from mmgate.scheduling.contracts import PluginHandle, Producer
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT, PrefixMatch, TokenizedPrompt
from mmgate.scheduling.plugins._lora import adapter_of
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest
from mmgate.vllm.blocks import HASH_ALGOS, BlockHasher, LoRA, event_hash

VLLM_ALGOS = tuple(a for a in HASH_ALGOS if a != "builtin")


class TokenProcessorConfig(msgspec.Struct, forbid_unknown_fields=True):
    """How request tokens become block keys; must match the pods' vLLM flags."""

    blockSize: int = 16  # vLLM --block-size
    hashSeed: str = ""  # the pods' PYTHONHASHSEED ("" = vLLM's default seed for the algorithm)
    hashAlgorithm: str = "sha256"  # mmgate: vLLM --prefix-caching-hash-algo
    intBlockHashes: bool = True  # mmgate: VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (vLLM's default 1)
    maxPrefixBlocksToMatch: int = 8192  # mmgate: bound on the blocks hashed per request


class PreciseParams(msgspec.Struct, forbid_unknown_fields=True):
    tokenProcessorConfig: TokenProcessorConfig = msgspec.field(default_factory=TokenProcessorConfig)
    indexerConfig: Any = None  # llm-d's; the index here is mmgate.datalayer.index
    kvEventsConfig: Any = None  # llm-d's; the subscriber is mmgate.kvEvents + endpoints' kvEvents
    speculativeIndexing: bool = False
    speculativeTTL: str = "2s"


class PrecisePrefixCacheProducer(Producer[PreciseParams]):
    type_name = "precise-prefix-cache-producer"

    def __init__(self, name: str, params: PreciseParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        tp = params.tokenProcessorConfig
        if tp.hashAlgorithm not in VLLM_ALGOS:
            raise ValueError(
                f"tokenProcessorConfig.hashAlgorithm {tp.hashAlgorithm!r}: use the pods' "
                f"--prefix-caching-hash-algo ({', '.join(VLLM_ALGOS)}); llm-d's own cbor-fnv/xxh64 "
                "keys are not what vLLM publishes"
            )
        if tp.blockSize <= 0 or tp.maxPrefixBlocksToMatch <= 0:
            raise ValueError("tokenProcessorConfig.blockSize and maxPrefixBlocksToMatch must be > 0")
        if params.speculativeIndexing:
            raise ValueError("speculativeIndexing is not supported: the index follows the pods' events")
        blocks = handle.kv_blocks
        if blocks is None:
            raise ValueError(
                "precise-prefix-cache-producer reads the pods' KV events: configure mmgate.kvEvents "
                "(or kvEvents on the endpoints) so the gateway subscribes to them"
            )
        self.blocks: AffinityStore[Any] = blocks
        self.hasher = BlockHasher(tp.hashAlgorithm, tp.blockSize, tp.hashSeed or None)
        self._as_int = tp.intBlockHashes
        self._max_tokens = tp.maxPrefixBlocksToMatch * tp.blockSize
        # Only under its own name: consumers name it (llm-d's prefixMatchInfoProducerName), and the
        # unscoped key stays the approximate producer's, the default source of prefix scorers.
        self._keys: tuple[DataKey[Any], ...] = (PREFIX_MATCH.scoped(name),)

    def produces(self) -> tuple[DataKey[Any], ...]:
        return self._keys

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT,)

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        tp: TokenizedPrompt | None = request.get(TOKENIZED_PROMPT)
        size = self.hasher.block_size
        if tp is None:
            info = PrefixMatch(size, 0, 0, [], {})
        else:
            ids = tp.token_ids[: self._max_tokens]
            media = [m for m in tp.media if m.offset < len(ids)]
            digests = self.hasher.block_hashes(ids, media, tp.cache_salt, lora_of(request, endpoints))
            keys: list[Any] = [event_hash(d) for d in digests] if self._as_int else list(digests)
            matched = self.blocks.longest_prefix(keys) if keys else {}
            info = PrefixMatch(size, len(keys), len(tp.token_ids), keys, matched)
        for key in self._keys:
            request.put(key, info)


def lora_of(request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> LoRA | None:
    """The adapter the request names, as vLLM keys its blocks (name and path), when a candidate's
    ``/v1/models`` lists its model as an adapter: the adapter is part of every block's key, so its
    requests hit only blocks that requests of the same adapter stored."""
    model = request.view.model
    adapter = adapter_of(model, endpoints)
    return None if adapter is None else LoRA(model, adapter.path)
