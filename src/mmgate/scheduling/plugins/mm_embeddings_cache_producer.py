"""``mm-embeddings-cache-producer``: which endpoints probably hold this request's media in their
encoder cache (vLLM's encoder-output cache), so the ViT need not run again.

Each endpoint has its own LRU of media content identities; capacity is
``cacheSizeInMBPerServer`` MiB ÷ 2 MiB per item (llm-d's sizing: 2048 items by default). For
every endpoint the producer publishes how many of the request's distinct items it holds, and how
many of their tokens (for the size-weighted score).

After a decision the identities are recorded for the endpoints that actually ran the encoder: the
targets of the ``encode`` profile (``encodeProfile``) when that profile ran, otherwise the primary
profile's targets; when ``encoder-header-handler`` planned an encoder per item, each item on its
own. llm-d at HEAD always records the primary (decode) profile — bug #2626 — so in
an E/PD topology its encode-profile scorer never sees a hit; mmgate records the encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from mmgate.datalayer.index.store import AffinityStore
from mmgate.scheduling.contracts import EndpointAware, PluginHandle, Producer
from mmgate.scheduling.keys import (
    ENCODER_CACHE_MATCH,
    ENCODER_PLAN,
    TOKENIZED_PROMPT,
    EncoderCacheMatch,
    TokenizedPrompt,
)
from mmgate.scheduling.lifecycle import PreRequest
from mmgate.scheduling.plugins._schemas import MMEmbeddingsParams
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest, SchedulingResult

BYTES_PER_ITEM = 2 * 1024 * 1024  # llm-d's assumed size of one item's embeddings
_NOBODY: Final[frozenset[str]] = frozenset()  # Final: compiled, a C static, not a globals read


class MMEmbeddingsCacheProducer(Producer[MMEmbeddingsParams], PreRequest, EndpointAware):
    type_name = "mm-embeddings-cache-producer"

    def __init__(self, name: str, params: MMEmbeddingsParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if params.cacheSizeInMBPerServer <= 0:
            raise ValueError(f"cacheSizeInMBPerServer must be > 0, got {params.cacheSizeInMBPerServer}")
        self.capacity = max(1, params.cacheSizeInMBPerServer * 1024 * 1024 // BYTES_PER_ITEM)
        self.index: AffinityStore[str] = handle.indexes.index(f"{self.type_name}/{name}")
        self._keys = self.own_keys(ENCODER_CACHE_MATCH)
        self._key_names = [key.name for key in self._keys]

    def produces(self) -> tuple[DataKey[Any], ...]:
        return self._keys

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT,)

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        # The data bag read and written directly (the value's type checked): compiled, a call of
        # the request's get / put is a call into Python code, each a measurable share of produce.
        data = request.data
        tp = data.get(TOKENIZED_PROMPT.name)
        if not isinstance(tp, TokenizedPrompt):
            tp = None
        identities: list[str] = []
        modalities: list[str] = []
        tokens: list[int] = []
        holders: list[frozenset[str]] = []
        matched_items: dict[str, int] = {}
        matched_tokens: dict[str, int] = {}
        matched_indices: dict[str, list[int]] = {}
        held_by = self.index.holders
        i = 0  # the item's index among the distinct ones
        for item in tp.media if tp is not None else ():
            identity = item.identity
            if identity in identities:  # a handful of items: a list scan beats a dict
                continue
            identities.append(identity)
            modalities.append(str(item.modality))
            length = item.length
            tokens.append(length)
            owners = held_by(identity)
            if owners is None:
                holders.append(_NOBODY)
            else:
                holders.append(owners)
                # An endpoint is in the three maps together (its first held item makes all
                # three entries), so one membership test decides for all of them.
                for ep in owners:
                    if ep in matched_items:
                        matched_items[ep] += 1
                        matched_tokens[ep] += length
                        matched_indices[ep].append(i)
                    else:
                        matched_items[ep] = 1
                        matched_tokens[ep] = length
                        matched_indices[ep] = [i]
            i += 1
        info = EncoderCacheMatch(
            identities, modalities, tokens, matched_items, matched_tokens, matched_indices, holders
        )
        for key in self._key_names:
            data[key] = info

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult, now: float) -> None:
        info = request.get(self._keys[-1])
        if info is None or not info.identities:
            return
        planned = request.get(ENCODER_PLAN)
        if planned:  # encoder-header-handler sent each item to one encoder
            for identity, endpoint in planned.items():
                self.index.add(endpoint, [identity], self.capacity)
            return
        encode = result.profiles.get(self.params.encodeProfile)
        targets = (
            encode.targets
            if encode is not None and encode.targets
            else result.targets_of(result.primary_profile)
        )
        for ep in targets:
            self.index.add(ep.name, info.identities, self.capacity)

    def remove_endpoint(self, name: str) -> None:
        self.index.remove_endpoint(name)
