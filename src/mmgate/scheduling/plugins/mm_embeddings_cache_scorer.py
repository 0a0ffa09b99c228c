"""``mm-embeddings-cache-scorer``: prefer endpoints whose encoder cache holds the request's media.

score = matched items / distinct items (llm-d), 0 for a request without media. With
``sizeWeighted: true`` (mmgate) each item weighs its tokens instead, so holding the 900-token
image of a request counts for more than holding its 64-token thumbnail — the encoder time saved.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.keys import ENCODER_CACHE_MATCH, EncoderCacheMatch
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class MMEmbeddingsScorerParams(msgspec.Struct, forbid_unknown_fields=True):
    producerName: str = ""
    sizeWeighted: bool = False


class MMEmbeddingsCacheScorer(Scorer[MMEmbeddingsScorerParams]):
    type_name = "mm-embeddings-cache-scorer"

    def __init__(self, name: str, params: MMEmbeddingsScorerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._key: DataKey[EncoderCacheMatch] = ENCODER_CACHE_MATCH.scoped(params.producerName)

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        info = request.get(self._key)
        if info is None or not info.identities:
            return [0.0] * len(endpoints)
        if self.params.sizeWeighted:
            matched, total = info.matched_tokens, float(info.total_tokens)
        else:
            matched, total = info.matched_items, float(info.total_items)
        if total <= 0:
            return [0.0] * len(endpoints)
        return [matched.get(ep.name, 0) / total for ep in endpoints]
