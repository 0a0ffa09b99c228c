"""The encoder stage: encoder-cache hits, eviction, the per-step budget, whole items, pinning,
and encoder data parallelism (vLLM's ``--mm-encoder-tp-mode data``)."""

from __future__ import annotations

import pytest

from mmgate.sim.core import (
    Engine,
    EngineConfig,
    MediaSpan,
    SimRequest,
)
from mmgate.sim.core.encoder import lane_makespan
from support.sim_core import IMG, Run, drain, mm_request, serve


def test_encoder_cache_hit_skips_encode() -> None:
    engine = Engine("fast")
    run = serve(engine, mm_request("a", 40, "cat"), mm_request("b", 8, "cat", tail=30))
    prefills = [s for s in run.steps if s.prefill_tokens]
    assert prefills[0].encoded_items == 1 and prefills[0].encoder_seconds > 0
    assert prefills[1].encoded_items == 0 and prefills[1].encoder_seconds == 0
    stats = engine.stats()
    assert (stats.encoder_cache_queries, stats.encoder_cache_hits) == (2, 1)


def test_encoder_cache_off_encodes_every_time() -> None:
    engine = Engine("fast", EngineConfig(encoder_cache_tokens=0))
    run = serve(engine, mm_request("a", 40, "cat"), mm_request("b", 8, "cat", tail=30))
    assert [s.encoded_items for s in run.steps if s.prefill_tokens] == [1, 1]
    assert engine.stats().encoder_cache_hits == 0


def test_prefix_hit_over_the_whole_image_needs_no_encoder() -> None:
    engine = Engine("fast", EngineConfig(encoder_cache_tokens=0))
    run = serve(
        engine, mm_request("a", 16, "cat", tokens=32, tail=40), mm_request("b", 16, "cat", tokens=32, tail=40)
    )
    assert run.finished["b"].cached_tokens == 80  # 88 tokens: all 5 full blocks
    assert [s.encoded_items for s in run.steps if s.prefill_tokens] == [1, 0]
    assert engine.stats().encoder_cache_queries == 1


def test_encoder_cache_evicts_oldest_freed_first() -> None:
    engine = Engine("fast", EngineConfig(encoder_cache_tokens=200, enable_prefix_caching=False))
    serve(engine, *(mm_request(f"r{i}", 8, f"img{i}", tokens=64) for i in range(3)))  # img0..2: 192 tokens
    serve(engine, mm_request("r3", 8, "img3", tokens=64))  # must evict img0, the oldest freed
    before = engine.stats().encoder_cache_hits
    serve(engine, mm_request("again2", 8, "img2", tokens=64))
    assert engine.stats().encoder_cache_hits == before + 1
    serve(engine, mm_request("again0", 8, "img0", tokens=64))
    assert engine.stats().encoder_cache_hits == before + 1


def test_encoder_budget_stops_the_chunk_before_an_image() -> None:
    engine = Engine("fast", EngineConfig(encoder_budget_tokens=100))
    ids = [1] * 10 + [IMG] * 80 + [2] * 10 + [IMG] * 80 + [3] * 10
    req = SimRequest("two", ids, [MediaSpan("a", 10, 80), MediaSpan("b", 100, 80)], max_tokens=2)
    engine.add_request(req, 0.0)
    first = engine.step(0.0)
    assert first.encoded_items == 1 and first.prefill_tokens == 100  # stops before image b
    second = engine.step(first.duration)
    assert second.encoded_items == 1 and second.prefill_tokens == 90
    assert second.first_token == ["two"]


@pytest.mark.parametrize("whole", [False, True])
def test_disable_chunked_mm_input_keeps_an_item_in_one_chunk(whole: bool) -> None:
    config = EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, disable_chunked_mm_input=whole)
    engine = Engine("fast", config)
    engine.add_request(SimRequest("r", [1] * 40 + [IMG] * 50 + [2] * 10, [MediaSpan("a", 40, 50)], 1), 0.0)
    chunks = [s.prefill_tokens for s in drain(engine).steps]
    assert chunks == ([40, 60] if whole else [64, 36])


def test_a_waiting_request_that_cannot_start_pins_no_encoder_output() -> None:
    """W hits X in the encoder cache but cannot get KV blocks; r2, preempted to the front of
    the queue, then needs room for Y. If W kept its reference on X, r2 could never start and
    the engine would stall with work left."""
    config = EngineConfig(num_gpu_blocks=17, encoder_cache_tokens=100, enable_prefix_caching=False)
    engine = Engine("fast", config)
    engine.add_request(SimRequest("r1", list(range(20)), max_tokens=100), 0.0)
    r2 = SimRequest("r2", [9] * 80 + list(range(20)), [MediaSpan("Y", 0, 80)], max_tokens=100)
    engine.add_request(r2, 0.0)
    run = Run()
    for _ in range(5):
        run.now += engine.step(run.now).duration
    prime = SimRequest("prime", [7] * 80 + [8] * 10, [MediaSpan("X", 0, 80)], max_tokens=1)
    engine.add_request(prime, run.now)
    while "prime" not in run.finished:
        out = engine.step(run.now)
        run.now += out.duration
        run.finished.update((f.request_id, f) for f in out.finished)
    w = SimRequest("w", [5] * 10 + [7] * 80 + [6] * 30, [MediaSpan("X", 10, 80)], max_tokens=1)
    engine.add_request(w, run.now)
    drain(engine, run, max_steps=2000)
    assert engine.stats().num_preemptions > 0
    assert set(run.finished) == {"r1", "r2", "prime", "w"}


def _four_images(rid: str = "r") -> SimRequest:
    ids: list[int] = [1] * 8
    items = []
    for i in range(4):
        items.append(MediaSpan(f"{rid}-img{i}", len(ids), 64))
        ids += [IMG] * 64
    return SimRequest(rid, [*ids, 2, 3], items, 1)


def _encoder_seconds(config: EngineConfig) -> tuple[float, int]:
    engine = Engine("fast", config)
    engine.add_request(_four_images(), 0.0)
    steps = drain(engine).steps
    return sum(s.encoder_seconds for s in steps), sum(s.encoded_items for s in steps)


def test_encoder_data_parallelism_encodes_four_items_of_a_step_in_a_quarter_of_the_time() -> None:
    alone, items = _encoder_seconds(EngineConfig())
    assert items == 4 and alone > 0
    four, items = _encoder_seconds(EngineConfig(mm_encoder_tp_mode="data", tensor_parallel_size=4))
    assert items == 4  # the same items, in the same step
    assert four == pytest.approx(alone / 4)
    two, _ = _encoder_seconds(EngineConfig(mm_encoder_tp_mode="data", tensor_parallel_size=2))
    assert two == pytest.approx(alone / 2)


def test_data_mode_on_a_one_gpu_replica_and_the_default_mode_run_the_same_steps() -> None:
    def run(config: EngineConfig) -> list[tuple[float, int, int]]:
        engine = Engine("fast", config)
        for i in range(6):
            engine.add_request(mm_request(f"r{i}", 10 + i, f"img{i % 3}", tokens=48 + 8 * i), 0.0)
        return [(s.duration, s.encoded_items, s.prefill_tokens) for s in drain(engine).steps]

    assert run(EngineConfig(mm_encoder_tp_mode="data")) == run(EngineConfig())  # the profile's TP is 1


def test_lanes_take_the_largest_items_first_onto_the_least_loaded() -> None:
    assert lane_makespan([5.0, 4.0, 3.0, 3.0, 3.0], 1) == 18.0
    assert lane_makespan([5.0, 4.0, 3.0, 3.0, 3.0], 2) == 10.0  # 5+3 | 4+3+3
    assert lane_makespan([5.0, 4.0], 4) == 5.0
    assert lane_makespan([], 4) == 0.0


def test_an_unknown_encoder_tp_mode_or_size_is_refused() -> None:
    with pytest.raises(ValueError, match="mm_encoder_tp_mode must be 'weights' or 'data'"):
        Engine("fast", EngineConfig(mm_encoder_tp_mode="pipeline"))
    with pytest.raises(ValueError, match="tensor_parallel_size must be at least 1"):
        Engine("fast", EngineConfig(mm_encoder_tp_mode="data", tensor_parallel_size=0))
