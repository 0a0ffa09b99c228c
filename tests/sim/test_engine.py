"""The simulated engine against vLLM V1 semantics (prefix cache, encoder cache, processor
cache, budgets, preemption, KV events), in virtual time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from mmgate.sim.engine import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Engine,
    EngineConfig,
    FinishedRequest,
    MediaSpan,
    SimRequest,
    StepOutput,
)
from mmgate.vllm.blocks import BlockHasher

IMG = 151_655  # any placeholder token id


def mm_request(rid: str, text: int, image: str | None, tokens: int = 64, max_tokens: int = 4, tail: int = 8):
    """``text`` prompt tokens (ids 1..), an image run, then ``tail`` more text tokens."""
    ids = list(range(1, text + 1))
    items = []
    if image is not None:
        items.append(MediaSpan(image, len(ids), tokens))
        ids += [IMG] * tokens
    ids += list(range(1000, 1000 + tail))
    return SimRequest(rid, ids, items, max_tokens)


@dataclass
class Run:
    steps: list[StepOutput] = field(default_factory=list)
    tokens: Counter[str] = field(default_factory=Counter)
    finished: dict[str, FinishedRequest] = field(default_factory=dict)
    now: float = 0.0


def drain(engine: Engine, run: Run | None = None, max_steps: int = 100_000) -> Run:
    run = run or Run()
    for _ in range(max_steps):
        if not engine.has_work():
            return run
        out = engine.step(run.now)
        run.now += out.duration
        run.steps.append(out)
        run.tokens.update(out.first_token)
        run.tokens.update(out.next_tokens)
        for f in out.finished:
            run.finished[f.request_id] = f
    raise AssertionError("engine did not drain")


def serve(engine: Engine, *requests: SimRequest) -> Run:
    """Requests one after another, each alone in the engine."""
    run = Run()
    for req in requests:
        engine.add_request(req, run.now)
        drain(engine, run)
    return run


def test_prefix_hits_only_while_text_and_image_match() -> None:
    engine = Engine("fast")
    base = mm_request("a", 40, "cat")  # image at 40..103, 112 tokens
    run = serve(
        engine,
        base,
        mm_request("same", 40, "cat"),
        mm_request("other-image", 40, "dog"),
    )
    assert run.finished["a"].cached_tokens == 0
    # Identical prompt: every full block hits except that vLLM recomputes the last token.
    assert run.finished["same"].cached_tokens == 96
    # Same text, other image: hits stop at block 2, the first one holding the image (tokens 32..47).
    assert run.finished["other-image"].cached_tokens == 32
    stats = engine.stats()
    assert stats.prefix_cache_queries == 3 * 112
    assert stats.prefix_cache_hits == 96 + 32


def test_prefix_caching_switch_off_means_no_hits_and_no_queries() -> None:
    engine = Engine("fast", EngineConfig(enable_prefix_caching=False))
    run = serve(engine, mm_request("a", 40, "cat"), mm_request("b", 40, "cat"))
    assert run.finished["b"].cached_tokens == 0
    assert engine.stats().prefix_cache_queries == 0


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


def test_token_budget_and_max_num_seqs_are_respected() -> None:
    engine = Engine("fast", EngineConfig(max_num_batched_tokens=64, max_num_seqs=3))
    for i in range(6):
        engine.add_request(SimRequest(f"r{i}", list(range(i * 500, i * 500 + 150)), max_tokens=5), 0.0)
    run = Run()
    while engine.has_work():
        out = engine.step(run.now)
        run.now += out.duration
        assert out.prefill_tokens + out.decode_seqs <= 64
        assert engine.stats().num_running <= 3
        run.tokens.update(out.first_token)
        run.tokens.update(out.next_tokens)
    assert all(run.tokens[f"r{i}"] == 5 for i in range(6))


def test_chunked_prefill_spreads_a_long_prompt() -> None:
    engine = Engine("fast", EngineConfig(max_num_batched_tokens=64, max_num_seqs=4))
    engine.add_request(SimRequest("long", list(range(200)), max_tokens=1), 0.0)
    run = drain(engine)
    assert [s.prefill_tokens for s in run.steps] == [64, 64, 64, 8]
    assert run.steps[-1].first_token == ["long"] and run.finished["long"].output_tokens == 1


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


def test_kv_events_carry_the_prefix_cache_keys() -> None:
    engine = Engine("fast", EngineConfig(kv_events=True, num_gpu_blocks=9))
    req = mm_request("a", 20, "cat", tokens=30, tail=14)  # 64 tokens: 4 blocks
    run = serve(engine, req)
    stored = [e for s in run.steps for e in s.events if isinstance(e, BlockStored)]
    keys = engine.hasher.block_hashes(req.token_ids, req.mm_items)
    assert stored[0].block_hashes == keys and stored[0].parent_block_hash is None
    assert stored[0].token_ids == list(req.token_ids)
    assert stored[0].extra_keys == [None, [("cat", 4)], [("cat", -12)], [("cat", -28)]]
    assert all(engine.is_cached(h) for h in keys)
    # Filling the remaining blocks with another request evicts a's blocks: one event per hash.
    run2 = serve(engine, SimRequest("b", list(range(500, 580)), max_tokens=1))
    removed = [e.block_hashes for s in run2.steps for e in s.events if isinstance(e, BlockRemoved)]
    assert removed and all(len(hs) == 1 for hs in removed)
    assert {hs[0] for hs in removed} <= set(keys)
    assert engine.reset_prefix_cache()
    assert isinstance(engine.step(run2.now).events[-1], AllBlocksCleared)


def test_decode_blocks_are_cached_as_they_fill() -> None:
    engine = Engine("fast", EngineConfig(kv_events=True))
    req = SimRequest("gen", list(range(24)), max_tokens=30)  # 24 + 30 tokens
    run = serve(engine, req)
    stored = [e for s in run.steps for e in s.events if isinstance(e, BlockStored)]
    hashes = [h for e in stored for h in e.block_hashes]
    assert len(hashes) == 3  # 54 tokens, last one never fed back: blocks 0..2 full
    out = engine.config.output_token_id
    expected = BlockHasher("sha256", 16).block_hashes(list(range(24)) + [out] * 29)
    assert hashes == expected
    assert stored[1].parent_block_hash == hashes[0]


def test_preemption_recomputes_and_every_request_still_gets_all_its_tokens() -> None:
    engine = Engine("fast", EngineConfig(num_gpu_blocks=13, max_num_seqs=8))  # 12 usable blocks
    for i in range(4):
        engine.add_request(SimRequest(f"r{i}", list(range(i * 100, i * 100 + 20)), max_tokens=40), 0.0)
    run = drain(engine)
    assert engine.stats().num_preemptions > 0
    preempted = {rid for s in run.steps for rid in s.preempted}
    assert preempted
    assert all(run.tokens[f"r{i}"] == 40 for i in range(4))
    assert all(run.finished[f"r{i}"].output_tokens == 40 for i in range(4))
    assert engine.stats().kv_cache_usage == 0.0
    # The latest admitted request is the victim (vLLM FCFS recompute preemption).
    first = next(s for s in run.steps if s.preempted)
    assert first.preempted[0] == "r3"


def test_kv_usage_follows_vllm_formula() -> None:
    engine = Engine("fast", EngineConfig(num_gpu_blocks=101))
    engine.add_request(SimRequest("a", list(range(160)), max_tokens=3), 0.0)
    engine.step(0.0)
    assert engine.stats().kv_cache_usage == pytest.approx(10 / 100)
    drain(engine)
    assert engine.stats().kv_cache_usage == 0.0  # cached blocks are free blocks


def test_abort_frees_everything() -> None:
    engine = Engine("fast")
    engine.add_request(SimRequest("a", list(range(100)), max_tokens=50), 0.0)
    engine.add_request(SimRequest("b", list(range(100, 200)), max_tokens=50), 0.0)
    engine.step(0.0)
    assert engine.abort("a") and engine.abort("b") and not engine.abort("a")
    assert not engine.has_work() and engine.stats().kv_cache_usage == 0.0


def test_decode_batches_almost_for_free_on_qwen2_vl() -> None:
    def decode_step(n: int) -> float:
        engine = Engine("qwen2-vl-2b-rtx4060")
        for i in range(n):
            engine.add_request(SimRequest(f"r{i}", list(range(i * 64, i * 64 + 64)), max_tokens=10), 0.0)
        engine.step(0.0)
        return engine.step(1.0).duration

    assert decode_step(16) < 1.15 * decode_step(1)


def test_bad_requests_are_rejected() -> None:
    engine = Engine("fast", EngineConfig(num_gpu_blocks=5))
    with pytest.raises(ValueError, match="KV blocks"):
        engine.add_request(SimRequest("big", list(range(100)), max_tokens=1), 0.0)
    with pytest.raises(ValueError, match="outside"):
        engine.add_request(SimRequest("x", [1, 2], [MediaSpan("i", 1, 5)]), 0.0)
    engine.add_request(SimRequest("ok", [1, 2]), 0.0)
    with pytest.raises(ValueError, match="already"):
        engine.add_request(SimRequest("ok", [1, 2]), 0.0)
    with pytest.raises(ValueError, match="max_model_len"):
        short = Engine("fast", EngineConfig(max_model_len=50))
        short.add_request(SimRequest("x", [1] * 40, max_tokens=20), 0.0)
    with pytest.raises(ValueError, match="max_num_seqs"):
        Engine("fast", EngineConfig(max_num_batched_tokens=8, max_num_seqs=16))


def test_noise_is_seeded() -> None:
    def durations(seed: int) -> list[float]:
        engine = Engine("fast", EngineConfig(noise=0.1, seed=seed))
        serve(engine, SimRequest("a", list(range(50)), max_tokens=5))
        return [
            s.duration
            for s in drain(engine, serve(engine, SimRequest("b", list(range(60)), max_tokens=5))).steps
        ]

    assert durations(1) == durations(1)
    assert durations(1) != durations(2)


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


@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_keep_the_invariants(seed: int) -> None:
    """Mixed text/image requests under a tight KV cache, small budgets and small caches: every
    request gets exactly its tokens, budgets hold every step, nothing stalls, memory returns."""
    import random

    rng = random.Random(seed)
    block_size = rng.choice([4, 16])
    config = EngineConfig(
        num_gpu_blocks=rng.choice([200, 400, 3000]) // block_size + 1,
        max_num_batched_tokens=rng.choice([32, 64, 256]),
        max_num_seqs=rng.choice([2, 4, 16]),
        encoder_cache_tokens=rng.choice([0, 60, 400]),
        encoder_budget_tokens=rng.choice([40, 100]),
        mm_processor_cache_gb=rng.choice([0.0, 1e-6]),
        enable_prefix_caching=rng.random() < 0.8,
        kv_events=True,
        block_size=block_size,
    )
    engine = Engine("fast", config)
    budget = engine.max_num_batched_tokens
    wanted: dict[str, int] = {}
    cached_keys: set[object] = set()
    pending = []
    for i in range(40):
        ids: list[int] = []
        items = []
        for _ in range(rng.randint(0, 2)):
            ids += [rng.randrange(3) for _ in range(rng.randint(0, 12))]
            length = rng.randint(1, 50)
            items.append(MediaSpan(f"img{rng.randrange(4)}", len(ids), length))
            ids += [IMG] * length
        ids += [rng.randrange(3) for _ in range(rng.randint(1, 20))]
        req = SimRequest(f"r{i}", ids, items, rng.randint(1, 30), cache_salt=rng.choice([None, "s"]))
        pending.append((rng.uniform(0, 0.05), req))
    pending.sort(key=lambda p: p[0])
    run = Run()
    idle = 0
    while pending or engine.has_work():
        while pending and pending[0][0] <= run.now:
            _, req = pending.pop(0)
            engine.add_request(req, run.now + engine.preprocess(req, run.now))
            wanted[req.request_id] = req.max_tokens
        if not engine.has_work():
            run.now = pending[0][0]
            continue
        out = engine.step(run.now)
        idle = idle + 1 if out.duration == 0 else 0
        assert idle < 3, "engine stalled with work left"
        run.now += out.duration
        assert out.prefill_tokens + out.decode_seqs <= budget
        assert engine.stats().num_running <= engine.max_num_seqs
        run.tokens.update(out.first_token)
        run.tokens.update(out.next_tokens)
        for f in out.finished:
            run.finished[f.request_id] = f
        for e in out.events:
            if isinstance(e, BlockStored):
                cached_keys.update(e.block_hashes)
            elif isinstance(e, BlockRemoved):
                assert e.block_hashes[0] in cached_keys
                cached_keys.discard(e.block_hashes[0])
    assert dict(run.tokens) == wanted
    assert {r: f.output_tokens for r, f in run.finished.items()} == wanted
    stats = engine.stats()
    assert stats.kv_cache_usage == 0.0 and stats.num_running == stats.num_waiting == 0
    assert all(engine.is_cached(h) for h in cached_keys)  # the events describe the cache


def test_remote_prefill_computes_only_the_last_prompt_token() -> None:
    """P/D decode side: the prompt's KV arrived from a prefill pod."""
    engine = Engine("fast", EngineConfig(kv_events=True))
    req = mm_request("d", 40, "cat", tokens=64, max_tokens=3)  # 112 tokens
    req.remote_prefill = True
    req.remote_encoded = frozenset({"cat"})
    run = serve(engine, req)
    first = run.steps[0]
    assert first.prefill_tokens == 1 and first.first_token == ["d"] and first.encoder_seconds == 0
    stored = [h for s in run.steps for e in s.events if isinstance(e, BlockStored) for h in e.block_hashes]
    assert stored[:7] == engine.hasher.block_hashes(req.token_ids, req.mm_items)
    assert run.finished["d"].cached_tokens == 111
    assert engine.stats().prefix_cache_hits == 0  # remote KV is not a local prefix hit
