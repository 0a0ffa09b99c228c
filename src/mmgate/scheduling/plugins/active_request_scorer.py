"""``active-request-scorer``: prefer endpoints with fewer requests in flight through the gateway.

Idle endpoints (count ≤ ``idleThreshold``) score 1.0; busy ones (maxCount − count) / maxCount ×
``maxBusyScore``, so ``maxBusyScore`` < 1 opens a gap between idle and busy.
"""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.keys import INFLIGHT_LOAD
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class ActiveRequestParams(msgspec.Struct, forbid_unknown_fields=True):
    idleThreshold: int = 0
    maxBusyScore: float = 1.0
    inFlightLoadProducerName: str = ""
    requestTimeout: str = ""  # deprecated and ignored by llm-d too


class ActiveRequestScorer(Scorer[ActiveRequestParams]):
    type_name = "active-request-scorer"

    def __init__(self, name: str, params: ActiveRequestParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if not 0.0 <= params.maxBusyScore <= 1.0:
            raise ValueError(f"maxBusyScore must be in [0, 1], got {params.maxBusyScore}")
        self._idle = max(0, params.idleThreshold)
        self._busy = params.maxBusyScore
        self._key: DataKey[Any] = INFLIGHT_LOAD.scoped(params.inFlightLoadProducerName)

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        counts = [ep.inflight.requests for ep in endpoints]
        top = max(counts)
        idle = self._idle
        busy = self._busy
        return [1.0 if c <= idle else (top - c) / top * busy for c in counts]
