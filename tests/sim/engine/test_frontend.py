"""The frontend's preprocessing: the processor cache and the worker queue."""

from __future__ import annotations

import pytest

from mmgate.sim.engine import (
    Engine,
    EngineConfig,
)
from support.engine import mm_request


def test_processor_cache_hit_removes_preprocessing_time() -> None:
    engine = Engine("fast")
    req = mm_request("a", 8, "cat", tokens=256)
    first = engine.preprocess(req, 0.0)
    second = engine.preprocess(mm_request("b", 8, "cat", tokens=256), 10.0)
    assert first == pytest.approx(engine.profile.preprocess.ms(256) / 1000)
    assert second == 0.0
    stats = engine.stats()
    assert (stats.processor_cache_queries, stats.processor_cache_hits) == (2, 1)
    off = Engine("fast", EngineConfig(mm_processor_cache_gb=0))
    off.preprocess(req, 0.0)
    assert off.preprocess(req, 10.0) == pytest.approx(first)
    assert off.stats().processor_cache_queries == 0


def test_preprocessing_queues_on_one_worker() -> None:
    engine = Engine("fast", EngineConfig(mm_processor_cache_gb=0))
    one = engine.profile.preprocess.ms(256) / 1000
    delays = [engine.preprocess(mm_request(f"r{i}", 8, f"img{i}", tokens=256), 0.0) for i in range(3)]
    assert delays == pytest.approx([one, 2 * one, 3 * one])
