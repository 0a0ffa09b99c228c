"""The engine's prefix cache: hits while text and media match, the switch, KV-event keys, decode blocks."""

from __future__ import annotations

import pytest

from mmgate.modelserver.events import AllBlocksCleared, BlockRemoved, BlockStored
from mmgate.sim.core import Engine, EngineConfig, SimRequest
from mmgate.vllm.blocks import BlockHasher
from support.sim_core import mm_request, serve


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


@pytest.mark.parametrize(
    ("key_format", "extra"),
    [
        ("identifier", [None, ["cat"], ["cat"], ["cat"]]),
        ("offset", [None, [("cat", 4)], [("cat", -12)], [("cat", -28)]]),
    ],
)
def test_kv_events_speak_the_configured_vllm_generation(key_format: str, extra: list[object]) -> None:
    engine = Engine("fast", EngineConfig(kv_events=True, num_gpu_blocks=9, block_key_format=key_format))
    req = mm_request("a", 20, "cat", tokens=30, tail=14)
    run = serve(engine, req)
    stored = [e for s in run.steps for e in s.events if isinstance(e, BlockStored)]
    assert stored[0].extra_keys == extra
    assert stored[0].block_hashes == engine.hasher.block_hashes(req.token_ids, req.mm_items)
    tagged = Engine("fast", EngineConfig(num_gpu_blocks=9)).hasher.block_hashes(req.token_ids, req.mm_items)
    assert stored[0].block_hashes[0] == tagged[0]  # the text-only block is the same in every generation
    assert stored[0].block_hashes[1] != tagged[1]


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
