"""``mm-embeddings-cache-affinity-filter`` (mmgate): send a request to the pods whose encoder
cache holds its media — while that costs less waiting than the encoding it saves.

A scorer weight cannot trade a cache hit against a queue: with ``mm-embeddings-cache-scorer`` at a
fixed weight, popular images pile onto the pods that hold them and TTFT p90 suffers (measured in
docs/benchmarks/headline.md). This filter uses the prefix filter's gate instead: "sticky" pods
hold at least ``affinityThreshold`` of the request's media tokens; they alone are kept unless the
best of them is estimated to make the request wait more than ``maxTTFTPenaltyMs`` longer than the
best other pod (in-flight tokens / ``peakPrefillThroughput``). Set the penalty near the encoder
time a hit saves (tens to hundreds of ms), not the prefix filter's tens of seconds.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.contracts import Filter, PluginHandle
from mmgate.scheduling.keys import ENCODER_CACHE_MATCH, INFLIGHT_LOAD, EncoderCacheMatch
from mmgate.scheduling.plugins._affinity_gate import check_gate_params, gate
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class EncoderAffinityFilterParams(msgspec.Struct, forbid_unknown_fields=True):
    affinityThreshold: float = 0.5
    maxTTFTPenaltyMs: float = 200.0
    peakPrefillThroughput: float = 15928.0
    producerName: str = ""
    inFlightLoadProducerName: str = ""


class MMEmbeddingsCacheAffinityFilter(Filter[EncoderAffinityFilterParams]):
    type_name = "mm-embeddings-cache-affinity-filter"

    def __init__(self, name: str, params: EncoderAffinityFilterParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        check_gate_params(params.affinityThreshold, params.maxTTFTPenaltyMs, params.peakPrefillThroughput)
        self._match_key: DataKey[EncoderCacheMatch] = ENCODER_CACHE_MATCH.scoped(params.producerName)
        self._load_key: DataKey[Any] = INFLIGHT_LOAD.scoped(params.inFlightLoadProducerName)
        self.last_outcome = ""  # for tests and debugging: why the last call kept what it kept

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._match_key, self._load_key)

    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        p = self.params
        info = request.get(self._match_key)
        total = info.total_tokens if info is not None else 0
        if len(endpoints) <= 1 or info is None or total <= 0:
            self.last_outcome = "not-applicable"
            return endpoints
        kept, self.last_outcome = gate(
            endpoints,
            info.matched_tokens,
            total,
            p.affinityThreshold,
            p.maxTTFTPenaltyMs,
            p.peakPrefillThroughput,
        )
        return kept
