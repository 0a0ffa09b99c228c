"""Telemetry's one-call request accounting matches the per-metric updates it replaces."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from mmgate.datalayer.endpoints import EndpointRegistry
from mmgate.gateway import telemetry as telemetry_module
from mmgate.gateway.routing import Decision
from mmgate.gateway.telemetry import Telemetry


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


def test_the_label_cache_is_bounded_and_keeps_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry_module, "MAX_CACHED_CHILDREN", 3)
    t = Telemetry(EndpointRegistry())
    for i in range(5):
        t.request_done(f"m{i}", "200", "a:1", 0.01, None)
    t.request_done("m0", "200", "a:1", 0.01, None)  # evicted from the cache, still the same series
    assert len(t._requests._cache) <= 3
    assert 'mmgate_requests_total{endpoint="a:1",model="m0",status="200"} 2.0' in _page(t)
