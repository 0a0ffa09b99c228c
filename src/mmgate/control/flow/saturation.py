"""Is an endpoint full? A pure detector over what the data layer knows of it, and what the gateway
itself has sent there.

llm-d's ``utilization-detector``: an endpoint is saturated when its waiting queue is longer than
``queueDepthThreshold`` (5) or its KV cache is fuller than ``kvCacheUtilThreshold`` (0.8), and
metrics older than ``metricsStalenessThreshold`` count as saturated (an endpoint the gateway cannot
see is not one to send more to). A pool is saturated for a request when every candidate is.

mmgate adds what the gateway knows at once rather than at the next scrape: requests it sent to the
endpoint since that endpoint's last scrape count as waiting there (a scrape every 50 ms would
otherwise let one refresh release the whole queue onto a pod that looks empty), and optional
bounds on the requests it has in flight there and on the priced prompt tokens of those not
prefilled yet (no first token).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.datalayer.metrics import MetricsSnapshot


@dataclass(slots=True, frozen=True)
class DetectorSettings:
    queue_depth: int = 5
    kv_utilization: float = 0.8
    staleness_s: float = 2.0
    max_inflight_requests: int = 0  # 0: no bound
    max_inflight_tokens: int = 0  # 0: no bound


@dataclass(slots=True)
class EndpointLoad:
    """What the gateway has put on one endpoint: requests sent since its last scrape, requests in
    flight (sent, not finished), and the priced prompt tokens of those without a first token yet
    (the prefill backlog the gateway put there: a decoding request costs the pod little more
    prefill, so it does not count)."""

    since_scrape: int = 0
    requests: int = 0
    tokens: int = 0


class SaturationDetector:
    def __init__(self, settings: DetectorSettings | None = None) -> None:
        self.settings = settings if settings is not None else DetectorSettings()

    def saturated(self, metrics: MetricsSnapshot | None, load: EndpointLoad | None, now: float) -> bool:
        s = self.settings
        if metrics is None or now - metrics.scraped_at > s.staleness_s:
            return True
        pending = load.since_scrape if load is not None else 0
        if (metrics.waiting or 0.0) + pending > s.queue_depth:
            return True
        if metrics.kv_usage is not None and metrics.kv_usage > s.kv_utilization:
            return True
        if load is not None:
            if s.max_inflight_requests and load.requests >= s.max_inflight_requests:
                return True
            if s.max_inflight_tokens and load.tokens >= s.max_inflight_tokens:
                return True
        return False
