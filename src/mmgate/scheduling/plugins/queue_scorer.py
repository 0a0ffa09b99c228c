"""``queue-scorer``: prefer short waiting queues, min-max normalised across the candidates.

Reads the scraped ``num_requests_waiting``. score = (maxQ − q) / (maxQ − minQ); 1.0 for all when
every queue is equal. An endpoint whose metrics are missing or stale scores 0.
"""

from __future__ import annotations

from mmgate.scheduling.contracts import NoParams, Scorer
from mmgate.scheduling.plugins._min_max import lower_is_better
from mmgate.scheduling.types import EndpointState, SchedulingRequest


class QueueScorer(Scorer[NoParams]):
    type_name = "queue-scorer"

    def score(self, request: SchedulingRequest, endpoints: list[EndpointState]) -> list[float]:
        queues: list[float | None] = []
        add = queues.append
        now, staleness = request.now, request.staleness_s
        for ep in endpoints:
            m = ep.metrics  # SchedulingRequest.fresh_metrics written out: no call per endpoint
            add(None if m is None or now - m.scraped_at > staleness else m.waiting)
        return lower_is_better(queues)
