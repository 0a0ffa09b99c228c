"""The gateway's Prometheus metrics.

Each gateway owns a :class:`prometheus_client.CollectorRegistry`, so several gateways in one
process (tests, the demo) never share counters. Endpoint health is read at scrape time by a
collector instead of being pushed on every change. The per-request counters and histograms are
:mod:`mmgate.gateway.loopmetrics` ones: lock-free, for the event-loop thread that also serves
``/metrics``, exposing exactly what prometheus_client's would.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mmgate.control.circuit_breaker import State
from mmgate.control.decision import Decision
from mmgate.datalayer.endpoints import EndpointRegistry
from mmgate.gateway.loopmetrics import CounterChild, HistogramChild, LoopCounter, LoopHistogram
from mmgate.scheduling.tiers import TierDemand

log = logging.getLogger("mmgate.gateway")

# The *_created series double the page for no use to a scraper of a long-running process.
disable_created_metrics()  # type: ignore[no-untyped-call]

RATIO_BUCKETS = tuple(round(0.1 * i, 1) for i in range(11))
DECISION_BUCKETS = (25e-6, 50e-6, 100e-6, 200e-6, 400e-6, 800e-6, 1.6e-3, 3.2e-3, 6.4e-3, 0.0128, 0.0256, 0.1)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# |predicted - observed| TTFT: a good prediction is off by milliseconds, so finer at the low end.
ERROR_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25,
                 0.5, 1, 2.5, 5, 10, 30)  # fmt: skip


class _DoneSeries:
    """The series one kind of finished request updates: its count, its duration (only when an
    endpoint was chosen) and its time to first byte (once one was seen)."""

    __slots__ = ("count", "latency", "ttfb")

    def __init__(self, count: CounterChild, latency: HistogramChild | None) -> None:
        self.count = count
        self.latency = latency
        self.ttfb: HistogramChild | None = None


class _EndpointCollector(Collector):
    def __init__(self, registry: EndpointRegistry, clock: Callable[[], float]) -> None:
        self.registry = registry
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        healthy = GaugeMetricFamily(
            "mmgate_endpoint_healthy", "1 if the endpoint receives traffic, else 0", labels=["endpoint"]
        )
        age = GaugeMetricFamily(
            "mmgate_endpoint_metrics_age_seconds",
            "Seconds since the endpoint's /metrics was last scraped successfully",
            labels=["endpoint"],
        )
        waiting = GaugeMetricFamily(
            "mmgate_endpoint_waiting_requests",
            "Waiting queue last scraped from the endpoint",
            labels=["endpoint"],
        )
        now = self.clock()
        for record in self.registry.records():
            healthy.add_metric([record.name], 1.0 if record.health.healthy else 0.0)
            if record.metrics is not None:
                age.add_metric([record.name], max(0.0, now - record.metrics.scraped_at))
                if record.metrics.waiting is not None:
                    waiting.add_metric([record.name], record.metrics.waiting)
        yield healthy
        yield age
        yield waiting


class _TierCollector(Collector):
    """Per role, the work the gateway holds and the pods it asks for (:mod:`mmgate.scheduling.tiers`),
    read at scrape time."""

    def __init__(self, read: Callable[[], Sequence[TierDemand]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        families = (
            ("mmgate_tier_encoder_seconds", "encoder_seconds",
             "Encoder seconds placed on the role's pods and not yet ended"),
            ("mmgate_tier_prefill_tokens", "prefill_tokens",
             "Prompt tokens in flight on the role's pods still to prefill"),
            ("mmgate_tier_inflight_requests", "requests", "Requests in flight on the role's pods"),
            ("mmgate_tier_work_seconds", "work_seconds",
             "Encoder and prefill seconds the role's pods hold (queued and in service)"),
            ("mmgate_tier_replicas", "replicas", "Pods of the role the gateway routes to"),
            ("mmgate_tier_desired_replicas", "desired_replicas",
             "Pods the role's held work asks for (docs/disaggregation.md, sizing each tier)"),
        )  # fmt: skip
        demand = self.read()
        for name, field, documentation in families:
            family = GaugeMetricFamily(name, documentation, labels=["role"])
            for d in demand:
                family.add_metric([d.role], float(getattr(d, field)))
            yield family


class Telemetry:
    """The gateway's metrics; also the request controller's observer (decisions, failed attempts,
    retries, circuit breaker changes)."""

    def __init__(self, endpoints: EndpointRegistry, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = LoopCounter(
            "mmgate_requests", "Requests answered, by model, HTTP status and endpoint",
            ["model", "status", "endpoint"], registry=r,
        )  # fmt: skip
        self.inflight = Gauge("mmgate_inflight_requests", "Requests being proxied now", registry=r)
        self.decision_latency = LoopHistogram(
            "mmgate_decision_latency_seconds",
            "Scheduler time per attempt (pricing, producers, filters, scorers)",
            buckets=DECISION_BUCKETS, registry=r,
        )  # fmt: skip
        self.parse_latency = LoopHistogram(
            "mmgate_parse_seconds", "Time to parse a request body (media headers probed, not decoded)",
            buckets=DECISION_BUCKETS, registry=r,
        )  # fmt: skip
        self.request_latency = LoopHistogram(
            "mmgate_request_duration_seconds", "Time from request received to last byte sent",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttfb = LoopHistogram(
            "mmgate_time_to_first_byte_seconds", "Time from request received to first upstream byte",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.predicted_ttft = LoopHistogram(
            "mmgate_predicted_ttft_seconds",
            "Time to first token the scheduler predicted on the chosen endpoint (predicted-ttft-producer)",
            ["endpoint"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.observed_ttft = LoopHistogram(
            "mmgate_observed_ttft_seconds",
            "Time from sending to the first byte of a streamed answer, where a TTFT was predicted",
            ["endpoint"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft_error = LoopHistogram(
            "mmgate_ttft_prediction_error_seconds",
            "Per streamed answer where a TTFT was predicted: |predicted - observed| on the chosen endpoint",
            ["endpoint"], buckets=ERROR_BUCKETS, registry=r,
        )  # fmt: skip
        self.encode_decisions = LoopCounter(
            "mmgate_encode_decisions",
            "Requests with media by where their media were encoded (adaptive-encode-decider): "
            "outcome tier, local or split, and the reason",
            ["outcome", "reason"], registry=r,
        )  # fmt: skip
        self.priced_tokens = LoopCounter(
            "mmgate_priced_tokens", "Prompt tokens as priced by the gateway, by modality",
            ["modality"], registry=r,
        )  # fmt: skip
        self.encoder_queries = LoopCounter(
            "mmgate_encoder_cache_queries", "Media items routed, by chosen pod and modality",
            ["pod", "modality"], registry=r,
        )  # fmt: skip
        self.encoder_hits = LoopCounter(
            "mmgate_encoder_cache_hits", "Media items routed to a pod believed to hold their encoding",
            ["pod", "modality"], registry=r,
        )  # fmt: skip
        self.encoder_hit_ratio = LoopHistogram(
            "mmgate_encoder_cache_hit_ratio", "Per request: media items believed cached on the chosen pod",
            buckets=RATIO_BUCKETS, registry=r,
        )  # fmt: skip
        self.prefix_match = LoopHistogram(
            "mmgate_prefix_match_ratio", "Per request: prompt blocks believed cached on the chosen pod",
            buckets=RATIO_BUCKETS, registry=r,
        )  # fmt: skip
        self.retries = LoopCounter(
            "mmgate_retries", "Attempts re-sent to another endpoint before the first byte, by reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.upstream_errors = LoopCounter(
            "mmgate_upstream_errors", "Failed attempts, by endpoint and reason",
            ["endpoint", "reason"], registry=r,
        )  # fmt: skip
        self.url_probes = LoopCounter(
            "mmgate_url_probe", "URL media probes by outcome (hit, miss, refused, timeout, failed)",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.ejections = Counter(
            "mmgate_endpoint_ejections_total",
            "Times an endpoint was ejected by the circuit breaker (outlier detection)",
            ["endpoint"], registry=r,
        )  # fmt: skip
        self.circuit_open = Gauge(
            "mmgate_endpoint_circuit_open",
            "1 while the endpoint's circuit breaker keeps it out of rotation (open or half-open)",
            ["endpoint"], registry=r,
        )  # fmt: skip
        r.register(_EndpointCollector(endpoints, clock))
        # The series every request updates, held here so an update is one call on the series
        # (a label lookup is a Python call of its own, several per request).
        # The controller's report of a parse (ControlObserver.record_parse) is the series' own
        # observe: one call per request, not a method forwarding to it.
        self.record_parse: Callable[[float], None] = self.parse_latency.labels().observe
        self._decision_s = self.decision_latency.labels()
        self._prefix_match = self.prefix_match.labels()
        self._encoder_hit_ratio = self.encoder_hit_ratio.labels()
        self._priced: dict[str, CounterChild] = {}  # by modality
        self._done: dict[tuple[str, str, str], _DoneSeries] = {}  # by model, status, endpoint

    def url_probed(self, outcome: str) -> None:
        self.url_probes.labels(outcome).inc()

    def attempt_failed(self, endpoint: str, reason: str) -> None:
        self.upstream_errors.labels(endpoint, reason).inc()

    def retried(self, reason: str) -> None:
        self.retries.labels(reason).inc()

    def circuit_changed(self, endpoint: str, state: State) -> None:
        self.circuit_open.labels(endpoint).set(0 if state is State.CLOSED else 1)
        if state is State.OPEN:
            self.ejections.labels(endpoint).inc()
            log.warning("endpoint %s ejected by the circuit breaker", endpoint)
        elif state is State.CLOSED:
            log.info("endpoint %s back in rotation (half-open probe succeeded)", endpoint)

    def ttft_observed(self, endpoint: str, predicted_s: float, observed_s: float) -> None:
        """A streamed answer's first byte, with what was predicted for it: the two histograms per
        endpoint show operators whether the predictions are right on average, the error histogram
        how far off each one is (two distributions alike can still pair badly)."""
        self.predicted_ttft.labels(endpoint).observe(predicted_s)
        self.observed_ttft.labels(endpoint).observe(observed_s)
        self.ttft_error.labels(endpoint).observe(abs(predicted_s - observed_s))

    def record_decision(self, decision: Decision, seconds: float, *, first_attempt: bool) -> None:
        self._decision_s.observe(seconds)
        if not first_attempt:
            return
        priced = self._priced
        for modality, tokens in decision.tokens_by_modality.items():
            child = priced.get(modality)
            if child is None:
                child = priced[modality] = self.priced_tokens.labels(modality)
            child.inc(tokens)
        queried = sum(decision.encoder_items.values()) if decision.encoder_items else 0
        if queried:
            hits = 0
            for modality, items in decision.encoder_items.items():
                hit = decision.encoder_hits.get(modality, 0)
                hits += hit
                self.encoder_queries.labels(decision.endpoint, modality).inc(items)
                self.encoder_hits.labels(decision.endpoint, modality).inc(hit)
            self._encoder_hit_ratio.observe(hits / queried)
        if decision.prefix_match is not None:
            self._prefix_match.observe(decision.prefix_match)
        if decision.encode is not None:
            self.encode_decisions.labels(*decision.encode).inc()

    def tiers_from(self, read: Callable[[], Sequence[TierDemand]]) -> None:
        """Export each tier's held work and desired replicas, read from ``read()`` at scrape time."""
        self.registry.register(_TierCollector(read))

    def inflight_from(self, read: Callable[[], float]) -> None:
        """Read ``mmgate_inflight_requests`` from ``read()`` at scrape time (e.g. the admission
        slots held) instead of an ``inflight.inc()``/``dec()`` pair on every request."""
        self.inflight.set_function(read)

    def request_done(
        self, model: str, status: str, endpoint: str, duration_s: float, first_byte_s: float | None
    ) -> None:
        """The end of one request, in one call: the request counter (``endpoint`` ``""`` counts
        as ``-``), its duration when an endpoint was chosen, and its time to first byte if any.

        Equivalent to the three ``labels(...)`` updates it replaces; the three series of each
        (model, status, endpoint) are looked up once, then kept together.
        """
        series = self._done.get((model, status, endpoint))
        if series is None:
            series = self._done[model, status, endpoint] = _DoneSeries(
                self.requests.labels(model, status, endpoint or "-"),
                self.request_latency.labels(model) if endpoint else None,
            )
        series.count.inc()
        if series.latency is not None:
            series.latency.observe(duration_s)
        if first_byte_s is not None:
            ttfb = series.ttfb
            if ttfb is None:  # made at its first observation, as labels(...).observe() would
                ttfb = series.ttfb = self.ttfb.labels(model)
            ttfb.observe(first_byte_s)
