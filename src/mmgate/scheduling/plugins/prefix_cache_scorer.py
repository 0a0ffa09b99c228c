"""``prefix-cache-scorer``: prefer endpoints that already hold a long prefix of the request.

score = w · min(1, matchedTokens / matchLengthScaleTokens)² + (1 − w) · matchedBlocks / totalBlocks
with w = ``matchLengthWeight`` (default 0: the plain matched fraction). Reads ``PrefixCacheMatchInfo``
from ``approx-prefix-cache-producer`` (or the producer named by ``prefixMatchInfoProducerName``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.keys import PREFIX_MATCH, PrefixMatch
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class PrefixScorerParams(msgspec.Struct, forbid_unknown_fields=True):
    matchLengthWeight: float = 0.0
    matchLengthScaleTokens: int = 8192
    prefixMatchInfoProducerName: str = ""


class PrefixCacheScorer(Scorer[PrefixScorerParams]):
    type_name = "prefix-cache-scorer"

    def __init__(self, name: str, params: PrefixScorerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if not 0.0 <= params.matchLengthWeight <= 1.0:
            raise ValueError(f"matchLengthWeight must be in [0, 1], got {params.matchLengthWeight}")
        if params.matchLengthScaleTokens <= 0:
            raise ValueError("matchLengthScaleTokens must be > 0")
        self._key: DataKey[PrefixMatch] = PREFIX_MATCH.scoped(params.prefixMatchInfoProducerName)

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        info = request.get(self._key)
        if info is None or info.total_blocks <= 0:
            return [0.0] * len(endpoints)
        w = self.params.matchLengthWeight
        scale = float(self.params.matchLengthScaleTokens)
        out = []
        for ep in endpoints:
            fraction = info.ratio(ep.name)
            if w:
                length = min(1.0, info.matched_tokens(ep.name) / scale)
                out.append(w * length * length + (1.0 - w) * fraction)
            else:
                out.append(fraction)
        return out
