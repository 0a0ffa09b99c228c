"""``predicted-ttft-scorer``: prefer the endpoint predicted to give this request its first token
soonest (``predicted-ttft-producer`` makes the predictions).

score = (worst − predicted) / (worst − best) over the candidates, min-max normalised as llm-d's
``queue-scorer`` is: the fastest gets 1, the slowest 0, all 1 when every prediction is equal.
One physical quantity replaces hand-weighted affinity and load scores: a cache hit wins exactly
when the encode and prefill time it saves exceeds the extra queue it costs on that endpoint.
"""

from __future__ import annotations

from typing import Any

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.keys import PREDICTED_TTFT, PredictedTTFT
from mmgate.scheduling.plugins._min_max import lower_is_better, lower_is_better_known
from mmgate.scheduling.plugins._schemas import PredictedTTFTScorerParams
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class PredictedTTFTScorer(Scorer[PredictedTTFTScorerParams]):
    type_name = "predicted-ttft-scorer"

    def __init__(self, name: str, params: PredictedTTFTScorerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if not params.workWeight >= 0:
            raise ValueError(f"workWeight must be >= 0, got {params.workWeight}")
        self._key: DataKey[PredictedTTFT] = PREDICTED_TTFT.scoped(params.predictedTTFTProducerName)
        self._key_name = self._key.name
        if not params.futureWeight >= 0:
            raise ValueError(f"futureWeight must be >= 0, got {params.futureWeight}")
        self._work_weight = params.workWeight
        self._future_weight = params.futureWeight

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        # The data bag read directly (the value's type checked): compiled, a call of the
        # request's get is a call into Python code.
        info = request.data.get(self._key_name)
        if not isinstance(info, PredictedTTFT):
            return [0.0] * len(endpoints)
        seconds = info.seconds
        beta, gamma = self._work_weight, self._future_weight
        # The producer predicts every endpoint the scheduler was given, so a candidate without a
        # prediction is rare: the costs are built for the case where all have one (no test per
        # candidate) and rebuilt with gaps only when one has not. Each name read once: compiled,
        # an attribute of the (uncompiled) endpoint state is a generic attribute lookup.
        costs: list[float] = []
        add = costs.append
        try:
            if not beta and not gamma:
                for ep in endpoints:
                    add(seconds[ep.name])
            elif not beta:  # s + (0 * w + g * F) is s + g * F, bit for bit (w is finite)
                future = info.future
                for ep in endpoints:
                    name = ep.name
                    add(seconds[name] + gamma * future[name])
            else:
                work, future = info.work, info.future  # filled together with seconds
                for ep in endpoints:
                    name = ep.name
                    add(seconds[name] + (beta * work[name] + gamma * future[name]))
        except KeyError:
            work = info.work
            return lower_is_better([self._cost(info, work, ep.name) for ep in endpoints])
        return lower_is_better_known(costs)

    def _cost(self, info: PredictedTTFT, work: dict[str, float], name: str) -> float | None:
        """One candidate's cost, ``None`` without a prediction (it then scores 0)."""
        if name not in info.seconds:
            return None
        return info.seconds[name] + (self._work_weight * work[name] + self._future_weight * info.future[name])
