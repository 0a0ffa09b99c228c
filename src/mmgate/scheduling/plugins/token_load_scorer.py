"""``token-load-scorer``: prefer endpoints with fewer in-flight prompt tokens.

score = 1 − min(1, load / ``queueThresholdTokens``), where load is the endpoint's in-flight tokens
from ``inflight-load-producer``. Because requests are priced in real tokens (media included),
a four-image request weighs what it costs, not what its body length suggests.

mmgate adds ``encoderCostFactor`` (default 1.0, llm-d's behaviour): media tokens count that many
times, since a vision encoder makes a media token slower to prefill than a text token
(llm-d issue #2220 asks for exactly this separation).
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.keys import INFLIGHT_LOAD
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class TokenLoadParams(msgspec.Struct, forbid_unknown_fields=True):
    queueThresholdTokens: int = 4_194_304
    inFlightLoadProducerName: str = ""
    encoderCostFactor: float = 1.0


class TokenLoadScorer(Scorer[TokenLoadParams]):
    type_name = "token-load-scorer"

    def __init__(self, name: str, params: TokenLoadParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if params.queueThresholdTokens <= 0:
            raise ValueError(f"queueThresholdTokens must be > 0, got {params.queueThresholdTokens}")
        if params.encoderCostFactor < 0:
            raise ValueError(f"encoderCostFactor must be >= 0, got {params.encoderCostFactor}")
        self._key: DataKey[Any] = INFLIGHT_LOAD.scoped(params.inFlightLoadProducerName)
        self._limit = float(params.queueThresholdTokens)
        self._extra = params.encoderCostFactor - 1.0

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        limit = self._limit
        extra = self._extra
        out: list[float] = []
        add = out.append
        for ep in endpoints:
            f = ep.inflight
            share = (f.tokens + extra * f.media_tokens) / limit
            add(1.0 - (share if share < 1.0 else 1.0))  # min(1.0, share), NaN included, no call
        return out
