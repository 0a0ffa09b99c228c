"""Flow control's Prometheus metrics, read from the dispatcher when ``/metrics`` is scraped (no
work on the request path).

Per band (``priority``): requests and bytes held, dispatches (``held="true"`` for those that
waited), rejections by ``reason`` (``queue_full``, ``bytes_full``, ``shed``, ``evicted``, ``ttl``,
``withdrawn``), and the total time held (with the held dispatches, a mean). Per flow (``flow``,
the fairness id): requests and bytes held and the oldest one's wait, for the flows holding
requests now, at most :data:`MAX_FLOW_SERIES` of them (the largest by bytes): fairness ids are
client input, so the series must stay bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mmgate.control.flow import FlowDispatcher

MAX_FLOW_SERIES = 100


class FlowCollector(Collector):
    def __init__(self, dispatcher: FlowDispatcher, clock: Callable[[], float] = time.monotonic) -> None:
        self._dispatcher = dispatcher
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        d = self._dispatcher
        stats = d.stats
        held = GaugeMetricFamily(
            "mmgate_flow_held_requests", "Requests held by flow control", labels=["priority"]
        )
        held_bytes = GaugeMetricFamily(
            "mmgate_flow_held_bytes", "Body bytes of the requests held by flow control", labels=["priority"]
        )
        for priority, band in d.bands.items():
            held.add_metric([str(priority)], band.count)
            held_bytes.add_metric([str(priority)], band.bytes)
        yield held
        yield held_bytes
        flow_requests = GaugeMetricFamily(
            "mmgate_flow_queue_requests", "Requests held per flow", labels=["priority", "flow"]
        )
        flow_bytes = GaugeMetricFamily(
            "mmgate_flow_queue_bytes", "Bytes held per flow", labels=["priority", "flow"]
        )
        oldest = GaugeMetricFamily(
            "mmgate_flow_queue_oldest_wait_seconds", "How long the flow's next request has waited",
            labels=["priority", "flow"],
        )  # fmt: skip
        queues = [(band.priority, q) for band in d.bands.values() for q in band.flows.values()]
        queues.sort(key=lambda pq: -pq[1].bytes)
        now = self._clock()
        for priority, queue in queues[:MAX_FLOW_SERIES]:
            labels = [str(priority), queue.fairness_id]
            flow_requests.add_metric(labels, queue.count)
            flow_bytes.add_metric(labels, queue.bytes)
            head = queue.head()
            oldest.add_metric(labels, max(0.0, now - head.arrived) if head is not None else 0.0)
        yield flow_requests
        yield flow_bytes
        yield oldest
        dispatched = CounterMetricFamily(
            "mmgate_flow_dispatched", "Requests flow control let through", labels=["priority", "held"]
        )
        for priority, count in stats.dispatched.items():
            waited = stats.held_dispatched.get(priority, 0)
            dispatched.add_metric([str(priority), "true"], waited)
            dispatched.add_metric([str(priority), "false"], count - waited)
        yield dispatched
        rejected = CounterMetricFamily(
            "mmgate_flow_rejected",
            "Requests flow control turned away, by reason",
            labels=["priority", "reason"],
        )
        for (priority, reason), count in stats.rejected.items():
            rejected.add_metric([str(priority), reason], count)
        yield rejected
        wait = CounterMetricFamily(
            "mmgate_flow_wait_seconds", "Total time dispatched requests were held", labels=["priority"]
        )
        for priority, seconds in stats.wait_s.items():
            wait.add_metric([str(priority)], seconds)
        yield wait
