"""``kv-cache-utilization-scorer``: score = 1 − KV-cache usage (vLLM ``kv_cache_usage_perc``).

Missing or stale metrics score 0.
"""

from __future__ import annotations

from mmgate.scheduling.framework import Scorer
from mmgate.scheduling.registry import plugin
from mmgate.scheduling.types import EndpointState, SchedulingRequest


@plugin("kv-cache-utilization-scorer")
class KVCacheUtilizationScorer(Scorer):
    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        out = []
        for ep in endpoints:
            m = request.fresh_metrics(ep)
            usage = None if m is None else m.kv_usage
            out.append(0.0 if usage is None else 1.0 - usage)
        return out
