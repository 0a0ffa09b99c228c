"""The scheduler against vLLM V1 semantics: budgets, chunked prefill, preemption, abort, the P/D decode
side, and invariants over random workloads."""

from __future__ import annotations

import pytest

from mmgate.modelserver.events import BlockRemoved, BlockStored
from mmgate.sim.core import Engine, EngineConfig, MediaSpan, SimRequest
from support.sim_core import IMG, Run, drain, mm_request, serve


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


def test_abort_frees_everything() -> None:
    engine = Engine("fast")
    engine.add_request(SimRequest("a", list(range(100)), max_tokens=50), 0.0)
    engine.add_request(SimRequest("b", list(range(100, 200)), max_tokens=50), 0.0)
    engine.step(0.0)
    assert engine.abort("a") and engine.abort("b") and not engine.abort("a")
    assert not engine.has_work() and engine.stats().kv_cache_usage == 0.0


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
