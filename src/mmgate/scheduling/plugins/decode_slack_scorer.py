"""``decode-slack-scorer``: prefer the PD pod whose running decodes have the most TPOT slack.

vLLM runs a PD pod's prefill chunks and encoder inside the engine step that decodes every running
request there, so each heavy prefill placed on a pod is a stall in one inter-token gap of each of
its decodes. A PD pod chosen by predicted TTFT alone (``predicted-ttft-scorer``) does not see that
stall: heavy prefills can pile onto one pod while its decodes drift past their TPOT SLO
(docs/benchmarks/disaggregation.md, "The decider's view of TPOT"). This scorer reads, per
candidate, the highest TPOT predicted for a request decoding there (``DECODE_OUTLOOK``, published by
``adaptive-encode-decider``, which follows every request's start, first token and end on its PD
pod) and scores its slack as a share of the SLO::

    score = clamp(1 - worst_predicted_tpot / tpotSLOSeconds, 0, 1)    (1 when nothing decodes)

The scale is absolute, not min-max: pods whose decodes are all far within the SLO score about
the same (a decode-only step is most of a TPOT), so the scorer moves the choice only where one pod
is near the line. Its weight against ``predicted-ttft-scorer`` sets how much TTFT it trades for
that. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.keys import DECODE_OUTLOOK, DecodeOutlook
from mmgate.scheduling.plugins._schemas import DecodeSlackScorerParams
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class DecodeSlackScorer(Scorer[DecodeSlackScorerParams]):
    type_name = "decode-slack-scorer"

    def __init__(self, name: str, params: DecodeSlackScorerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if not params.tpotSLOSeconds > 0:
            raise ValueError(f"tpotSLOSeconds must be > 0, got {params.tpotSLOSeconds}")
        self._slo = params.tpotSLOSeconds
        self._key: DataKey[DecodeOutlook] = DECODE_OUTLOOK.scoped(params.decodeOutlookProducerName)

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        outlook = request.get(self._key)
        if outlook is None:
            return [0.0] * len(endpoints)
        slo = self._slo
        now = request.now
        scores: list[float] = []
        for ep in endpoints:
            tpot = outlook.decode_tpot(ep, now)
            if tpot is None:
                scores.append(1.0)
            else:
                scores.append(min(1.0, max(0.0, 1.0 - tpot / slo)))
        return scores
