"""``predicted-ttft-scorer``: prefer the endpoint predicted to give this request its first token
soonest (``predicted-ttft-producer`` makes the predictions).

score = (worst − predicted) / (worst − best) over the candidates, min-max normalised as llm-d's
``queue-scorer`` is: the fastest gets 1, the slowest 0, all 1 when every prediction is equal.
One physical quantity replaces hand-weighted affinity and load scores: a cache hit wins exactly
when the encode and prefill time it saves exceeds the extra queue it costs on that endpoint.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.framework import PluginHandle, Scorer
from mmgate.scheduling.keys import PREDICTED_TTFT, PredictedTTFT
from mmgate.scheduling.plugins._min_max import lower_is_better
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class PredictedTTFTScorerParams(msgspec.Struct, forbid_unknown_fields=True):
    predictedTTFTProducerName: str = ""


class PredictedTTFTScorer(Scorer[PredictedTTFTScorerParams]):
    type_name = "predicted-ttft-scorer"

    def __init__(self, name: str, params: PredictedTTFTScorerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self._key: DataKey[PredictedTTFT] = PREDICTED_TTFT.scoped(params.predictedTTFTProducerName)

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        info = request.get(self._key)
        if info is None:
            return [0.0] * len(endpoints)
        seconds = info.seconds
        return lower_is_better([seconds.get(ep.name) for ep in endpoints])
