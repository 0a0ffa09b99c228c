"""``prefix-cache-affinity-filter``: keep only the endpoints that hold the request's prefix —
unless that would make the request wait too long.

"Sticky" endpoints hold at least ``affinityThreshold`` of the request's blocks. With none, or with
probability ``explorationProbability``, every endpoint is kept. Otherwise the TTFT load gate
compares the best sticky endpoint's estimated TTFT with the best non-sticky one's, where
TTFT = in-flight tokens / ``peakPrefillThroughput`` × 1000 ms; if stickiness costs more than
``maxTTFTPenaltyMs``, every endpoint is kept so the load scorers can spread the group.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from mmgate.scheduling.contracts import Filter, PluginHandle
from mmgate.scheduling.keys import INFLIGHT_LOAD, PREFIX_MATCH, PrefixMatch
from mmgate.scheduling.plugins._affinity_gate import check_gate_params, gate
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class AffinityFilterParams(msgspec.Struct, forbid_unknown_fields=True):
    affinityThreshold: float = 0.80
    explorationProbability: float = 0.0
    maxTTFTPenaltyMs: float = 18000.0
    ttftSource: Literal["prefillThroughput"] = "prefillThroughput"
    peakPrefillThroughput: float = 15928.0  # llm-d: Qwen 32B on 2x H100 (TP=2), vLLM 0.19
    prefixMatchInfoProducerName: str = ""
    inFlightLoadProducerName: str = ""


class PrefixCacheAffinityFilter(Filter[AffinityFilterParams]):
    type_name = "prefix-cache-affinity-filter"

    def __init__(self, name: str, params: AffinityFilterParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        check_gate_params(params.affinityThreshold, params.maxTTFTPenaltyMs, params.peakPrefillThroughput)
        if not 0.0 <= params.explorationProbability <= 1.0:
            raise ValueError(f"explorationProbability must be in [0, 1], got {params.explorationProbability}")
        self._prefix_key: DataKey[PrefixMatch] = PREFIX_MATCH.scoped(params.prefixMatchInfoProducerName)
        self._load_key: DataKey[Any] = INFLIGHT_LOAD.scoped(params.inFlightLoadProducerName)
        self._rng = handle.rng
        self.last_outcome = ""  # for tests and debugging: why the last call kept what it kept

    def consumes(self) -> tuple[DataKey[Any], ...]:
        if self.params.maxTTFTPenaltyMs > 0:
            return (self._prefix_key, self._load_key)
        return (self._prefix_key,)

    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        p = self.params
        info = request.get(self._prefix_key)
        if len(endpoints) <= 1 or p.affinityThreshold <= 0 or info is None:
            self.last_outcome = "not-applicable"
            return endpoints
        if p.explorationProbability > 0 and self._rng.random() < p.explorationProbability:
            self.last_outcome = "exploration"
            return endpoints
        if info.total_blocks <= 0:  # nothing hashed: no endpoint holds any of it
            self.last_outcome = "no-match"
            return endpoints
        kept, self.last_outcome = gate(
            endpoints,
            info.matched,
            info.total_blocks,
            p.affinityThreshold,
            p.maxTTFTPenaltyMs,
            p.peakPrefillThroughput,
        )
        return kept
