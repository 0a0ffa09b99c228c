"""``kv-cache-utilization-scorer``: score = 1 − KV-cache usage (vLLM ``kv_cache_usage_perc``).

Missing or stale metrics score 0.
"""

from __future__ import annotations

from mmgate.scheduling.contracts import NoParams, Scorer
from mmgate.scheduling.types import EndpointState, SchedulingRequest


class KVCacheUtilizationScorer(Scorer[NoParams]):
    type_name = "kv-cache-utilization-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        out = []
        for ep in endpoints:
            m = request.fresh_metrics(ep)
            usage = None if m is None else m.kv_usage
            out.append(0.0 if usage is None else 1.0 - usage)
        return out
