"""The KV block pool: LRU eviction under memory pressure, vLLM's usage formula."""

from __future__ import annotations

import pytest

from mmgate.modelserver.events import BlockRemoved
from mmgate.sim.core import Engine, EngineConfig, SimRequest
from support.sim_core import drain, serve


def test_eviction_under_memory_pressure_is_lru() -> None:
    engine = Engine("fast", EngineConfig(num_gpu_blocks=17, kv_events=True))  # 16 usable blocks
    old = SimRequest("old", list(range(100, 164)), max_tokens=1)  # 4 blocks
    recent = SimRequest("recent", list(range(200, 264)), max_tokens=1)
    run = serve(engine, old, recent)
    assert not [e for s in run.steps for e in s.events if isinstance(e, BlockRemoved)]
    old_keys = engine.hasher.block_hashes(old.token_ids)
    recent_keys = engine.hasher.block_hashes(recent.token_ids)
    assert all(engine.is_cached(h) for h in old_keys + recent_keys)
    # 9 blocks needed, 8 never used: one cached block must go — the least recently used
    # request's last block (vLLM frees a request's blocks tail first).
    big = serve(engine, SimRequest("big", list(range(1000, 1140)), max_tokens=1))
    removed = [h for s in big.steps for e in s.events if isinstance(e, BlockRemoved) for h in e.block_hashes]
    assert removed == [old_keys[3]]
    assert not engine.is_cached(old_keys[3])
    assert all(engine.is_cached(h) for h in old_keys[:3] + recent_keys)
    # Using "old" again refreshes it: the next eviction takes "recent"'s blocks instead.
    serve(engine, SimRequest("old-again", [*old.token_ids, 7, 7], max_tokens=1))
    serve(engine, SimRequest("big2", list(range(2000, 2140)), max_tokens=1))
    assert all(engine.is_cached(h) for h in old_keys[:3])
    assert not all(engine.is_cached(h) for h in recent_keys)


def test_kv_usage_follows_vllm_formula() -> None:
    engine = Engine("fast", EngineConfig(num_gpu_blocks=101))
    engine.add_request(SimRequest("a", list(range(160)), max_tokens=3), 0.0)
    engine.step(0.0)
    assert engine.stats().kv_cache_usage == pytest.approx(10 / 100)
    drain(engine)
    assert engine.stats().kv_cache_usage == 0.0  # cached blocks are free blocks
