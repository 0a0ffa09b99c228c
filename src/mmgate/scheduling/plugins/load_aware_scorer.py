"""``load-aware-scorer``: 0.5 for an empty waiting queue, falling linearly to 0 at ``threshold``.

score = 0.5 · (1 − q / threshold) for 0 < q < threshold; the maximum is 0.5 by design (llm-d),
so an idle endpoint never outweighs an affinity scorer on its own. Missing or stale metrics
score 0.
"""

from __future__ import annotations

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Scorer
from mmgate.scheduling.types import EndpointState, SchedulingRequest


class LoadAwareParams(msgspec.Struct, forbid_unknown_fields=True):
    threshold: int = 128


class LoadAwareScorer(Scorer[LoadAwareParams]):
    type_name = "load-aware-scorer"

    def __init__(self, name: str, params: LoadAwareParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if params.threshold <= 0:
            raise ValueError(f"threshold must be > 0, got {params.threshold}")
        self._threshold = float(params.threshold)

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        t = self._threshold
        out = []
        for ep in endpoints:
            m = request.fresh_metrics(ep)
            q = None if m is None else m.waiting
            if q is None:
                out.append(0.0)
            elif q <= 0:
                out.append(0.5)
            elif q >= t:
                out.append(0.0)
            else:
                out.append(0.5 * (1.0 - q / t))
        return out
