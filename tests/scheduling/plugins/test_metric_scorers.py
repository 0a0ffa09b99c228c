"""Scorers that read scraped metrics: queue, KV-cache utilization, load-aware."""

from __future__ import annotations

import random

import pytest

from mmgate.config import ConfigError
from mmgate.scheduling import EndpointState, Metrics, PluginHandle
from mmgate.scheduling.contracts import NoParams
from mmgate.scheduling.plugins.kv_cache_utilization_scorer import KVCacheUtilizationScorer
from mmgate.scheduling.plugins.load_aware_scorer import LoadAwareParams, LoadAwareScorer
from mmgate.scheduling.plugins.queue_scorer import QueueScorer
from support.scheduling import request, scheduler

H = PluginHandle(random.Random(0))


def eps(*waiting: float | None, usage: float = 0.0) -> list[EndpointState]:
    return [
        EndpointState(f"e{i}:1", metrics=None if w is None else Metrics(waiting=w, kv_usage=usage))
        for i, w in enumerate(waiting)
    ]


def test_queue_min_max_normalised() -> None:
    s = QueueScorer("q", NoParams(), H)
    assert s.score(request(), eps(0, 5, 10)) == [1.0, 0.5, 0.0]
    assert s.score(request(), eps(3, 3)) == [1.0, 1.0]
    assert s.score(request(), eps(2, None, 4)) == [1.0, 0.0, 0.0]


def test_kv_utilization() -> None:
    s = KVCacheUtilizationScorer("k", NoParams(), H)
    e = [EndpointState("a:1", metrics=Metrics(kv_usage=0.25)), EndpointState("b:1")]
    assert s.score(request(), e) == [0.75, 0.0]


def test_load_aware_shape() -> None:
    s = LoadAwareScorer("l", LoadAwareParams(threshold=100), H)
    assert s.score(request(), eps(0, 50, 100, 300, None)) == [0.5, 0.25, 0.0, 0.0, 0.0]


def test_load_aware_rejects_bad_threshold() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        scheduler([{"type": "load-aware-scorer", "parameters": {"threshold": 0}}])
