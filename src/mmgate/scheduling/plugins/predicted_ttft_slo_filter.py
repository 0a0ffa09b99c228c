"""``predicted-ttft-slo-filter``: keep the endpoints predicted to meet the request's TTFT SLO,
unless none is (then every endpoint is kept, and the scorers pick the least bad).

The SLO is the request's ``x-slo-ttft-ms`` header (llm-d's predicted-latency header, in
milliseconds) when present and a positive number, else ``sloSeconds``; with neither the filter
keeps everything. Predictions come from ``predicted-ttft-producer``.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from mmgate.scheduling.contracts import Filter, PluginHandle
from mmgate.scheduling.keys import PREDICTED_TTFT, PredictedTTFT
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest

SLO_HEADER = "x-slo-ttft-ms"


class PredictedTTFTSLOParams(msgspec.Struct, forbid_unknown_fields=True):
    sloSeconds: float = 0.0
    sloHeader: str = SLO_HEADER
    predictedTTFTProducerName: str = ""


class PredictedTTFTSLOFilter(Filter[PredictedTTFTSLOParams]):
    type_name = "predicted-ttft-slo-filter"

    def __init__(self, name: str, params: PredictedTTFTSLOParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if not params.sloSeconds >= 0:
            raise ValueError(f"sloSeconds must be >= 0, got {params.sloSeconds}")
        self._key: DataKey[PredictedTTFT] = PREDICTED_TTFT.scoped(params.predictedTTFTProducerName)
        self._header = params.sloHeader.lower()

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (self._key,)

    def slo_seconds(self, request: SchedulingRequest) -> float:
        """The request's SLO: the header's milliseconds when valid, else ``sloSeconds`` (0: none)."""
        return request_slo_seconds(request, self._header, self.params.sloSeconds)

    def filter(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[EndpointState]:
        slo = self.slo_seconds(request)
        info = request.get(self._key)
        if slo <= 0 or info is None or len(endpoints) <= 1:
            return endpoints
        seconds = info.seconds
        kept = [ep for ep in endpoints if seconds.get(ep.name, math.inf) <= slo]
        return kept or endpoints


def request_slo_seconds(request: SchedulingRequest, header: str, default: float) -> float:
    """A request's TTFT SLO in seconds: its ``header`` (lower case; milliseconds, llm-d's
    predicted-latency convention) when a positive finite number, else ``default``."""
    raw = request.headers.get(header)
    if raw:
        try:
            ms = float(raw)
        except ValueError:
            ms = 0.0
        if ms > 0 and math.isfinite(ms):
            return ms / 1000.0
    return default
