"""Telemetry's one-call request accounting matches the per-metric updates it replaces; the parse
histogram is fed by every request the controller parses."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from mmgate.control.decision import Decision
from mmgate.datalayer.endpoints import EndpointRegistry
from mmgate.gateway.loopmetrics import LoopCounter, LoopHistogram
from mmgate.gateway.telemetry import Telemetry
from support.stack import ROUND_ROBIN, chat_body, png, stack


def _page(t: Telemetry) -> str:
    return generate_latest(t.registry).decode()


def test_request_done_equals_the_three_label_updates() -> None:
    fast, slow = Telemetry(EndpointRegistry()), Telemetry(EndpointRegistry())
    calls = [
        ("m", "200", "a:1", 0.02, 0.01),
        ("m", "200", "a:1", 0.3, 0.2),
        ("m", "502", "", 0.001, None),  # never reached an endpoint: no latency, endpoint "-"
        ("other", "429", "b:2", 1.5, None),
    ]
    for model, status, endpoint, duration, ttfb in calls:
        fast.request_done(model, status, endpoint, duration, ttfb)
        slow.requests.labels(model, status, endpoint or "-").inc()
        if endpoint:
            slow.request_latency.labels(model).observe(duration)
        if ttfb is not None:
            slow.ttfb.labels(model).observe(ttfb)
    assert _page(fast) == _page(slow)
    assert 'mmgate_requests_total{endpoint="a:1",model="m",status="200"} 2.0' in _page(fast)
    assert 'mmgate_requests_total{endpoint="-",model="m",status="502"} 1.0' in _page(fast)
    assert 'mmgate_time_to_first_byte_seconds_count{model="other"}' not in _page(fast)


def test_decision_counters_are_cached_per_label_set() -> None:
    t = Telemetry(EndpointRegistry())
    decision = Decision(
        endpoint="a:1",
        tokens_by_modality={"text": 40, "image": 900},
        encoder_items={"image": 2},
        encoder_hits={"image": 1},
        prefix_match=0.5,
    )
    t.record_decision(decision, 1e-4, first_attempt=True)
    t.record_decision(decision, 1e-4, first_attempt=True)
    t.record_decision(decision, 1e-4, first_attempt=False)  # a retry counts its latency only
    page = _page(t)
    assert 'mmgate_priced_tokens_total{modality="image"} 1800.0' in page
    assert 'mmgate_encoder_cache_queries_total{modality="image",pod="a:1"} 4.0' in page
    assert 'mmgate_encoder_cache_hits_total{modality="image",pod="a:1"} 2.0' in page
    assert "mmgate_decision_latency_seconds_count 3.0" in page
    assert "mmgate_prefix_match_ratio_count 2.0" in page


def test_loop_metrics_expose_what_prometheus_client_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counters = (
        LoopCounter("c", "a counter", ["a", "b"], registry=ours),
        Counter("c", "a counter", ["a", "b"], registry=theirs),
    )
    plain = (LoopCounter("p", "unlabelled", registry=ours), Counter("p", "unlabelled", registry=theirs))
    buckets = (0.1, 0.5, 2.0)
    histograms = (
        LoopHistogram("h", "a histogram", ["m"], buckets=buckets, registry=ours),
        Histogram("h", "a histogram", ["m"], buckets=buckets, registry=theirs),
    )
    for counter in counters:
        counter.labels("x", "y").inc()
        counter.labels("x", 7).inc(2.5)  # values are stringified, as prometheus_client does
        counter.labels("x", "7").inc()
    for counter in plain:
        counter.inc(3)
    for histogram in histograms:
        for value in (0.05, 0.1, 0.3, 2.0, 9.0, float("nan")):
            histogram.labels("m1").observe(value)
        histogram.labels("m2").observe(0.2)
    assert generate_latest(ours) == generate_latest(theirs)
    page = generate_latest(ours).decode()
    assert 'c_total{a="x",b="7"} 3.5' in page and 'h_bucket{le="0.5",m="m1"} 3.0' in page
    with pytest.raises(ValueError, match="label count"):
        counters[0].labels("only-one")
    with pytest.raises(ValueError, match="non-negative"):
        plain[0].inc(-1)


def test_inflight_can_be_read_at_scrape_time() -> None:
    t = Telemetry(EndpointRegistry())
    held = [3]
    t.inflight_from(lambda: held[0])
    assert "mmgate_inflight_requests 3.0" in _page(t)
    held[0] = 0
    assert "mmgate_inflight_requests 0.0" in _page(t)


async def test_parse_seconds_counts_every_body_parsed_refusals_included() -> None:
    async with stack(ROUND_ROBIN, pods=1) as s:
        assert (await s.post(chat_body(s.model, "one"))).status == 200
        assert (await s.post(chat_body(s.model, "two", [png(1)]))).status == 200
        assert (await s.post(b'{"messages": []}')).status == 400  # parsed, then refused: it cost a parse
        async with s.session.get(s.url + "/metrics") as r:
            page = await r.text()
    count = re.search(r"^mmgate_parse_seconds_count (\S+)$", page, re.M)
    total = re.search(r"^mmgate_parse_seconds_sum (\S+)$", page, re.M)
    assert count is not None and float(count.group(1)) == 3.0
    assert total is not None and float(total.group(1)) > 0.0
