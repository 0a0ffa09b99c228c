"""The engine's processor, encoder and prefix caches: they skip work and change no answer."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mmgate.modelserver.events import BlockRemoved, BlockStored
from mmgate.refengine.caches import LruCache
from mmgate.refengine.model import tiny_model
from mmgate.refengine.prompt import prompt_from_messages
from mmgate.refengine.runtime import Engine, EngineConfig, GenerateRequest, StepOutput
from mmgate.refengine.vlm import Layout, VisionLanguageModel
from mmgate.vllm.blocks import BlockHasher
from support.vlm import one_pixel_off, picture, user_turn

STATELESS = EngineConfig(enable_prefix_caching=False, encoder_cache_tokens=0, processor_cache_bytes=0)
MEDIA_CACHES_ONLY = EngineConfig(enable_prefix_caching=False)


def _layout(engine: Engine, messages: list[dict[str, Any]]) -> Layout:
    prompt = prompt_from_messages(messages)
    images = [(img.identity, engine.processed(img)) for img in prompt.images]
    return engine.model.layout(engine.model.render(prompt.messages), images)


def _run(engine: Engine, rid: str, messages: list[dict[str, Any]], max_tokens: int = 1) -> list[StepOutput]:
    return engine.generate(GenerateRequest(rid, prompt_from_messages(messages), max_tokens=max_tokens))


def test_lru_counts_units_and_skips_what_cannot_fit() -> None:
    cache: LruCache[str, int] = LruCache(10, lambda v: v)
    assert cache.put("a", 4) == [] and cache.put("b", 4) == []
    assert cache.get("a") == 4  # a is now the most recent: b goes first
    assert cache.put("c", 4) == ["b"]
    assert cache.put("huge", 11) == [] and "huge" not in cache
    assert cache.used == 8 and len(cache) == 2
    assert not LruCache(0, lambda v: 1).enabled


def test_encoder_cache_gives_the_stateless_first_token_logits_exactly(tiny: VisionLanguageModel) -> None:
    image = picture(10)
    cached = Engine(tiny, MEDIA_CACHES_ONLY)
    _run(cached, "warm", [user_turn("describe the image", image)])
    assert cached.stages.encoded_items == 1 and cached.stages.processed_items == 1
    follow_up = [user_turn("what is in this picture", image)]
    with_cache = _run(cached, "hit", follow_up)[0].logits
    assert cached.stages.encoded_items == 1 and cached.stages.processed_items == 1  # both skipped
    stats = cached.stats
    assert (stats.encoder_cache_queries, stats.encoder_cache_hits) == (2, 1)
    assert (stats.processor_cache_queries, stats.processor_cache_hits) == (2, 1)
    assert stats.encoder_cache_used_tokens == 4  # 64x48 px resizes to 56x56: 4x4 patches, 2x2 merged
    assert torch.equal(with_cache, _run(Engine(tiny, STATELESS), "cold", follow_up)[0].logits)


def test_an_image_one_pixel_off_hits_no_cache(tiny: VisionLanguageModel) -> None:
    image = picture(11)
    engine = Engine(tiny)
    first = _run(engine, "a", [user_turn("describe the image", image)])[0]
    nudged = _run(engine, "b", [user_turn("describe the image", one_pixel_off(image))])[0]
    assert engine.stages.encoded_items == 2 and engine.stages.processed_items == 2
    stats = engine.stats
    assert stats.encoder_cache_hits == 0 and stats.processor_cache_hits == 0
    # the prefix cache reuses the blocks before the image only: no block holding it matches
    offset = _layout(engine, [user_turn("describe the image", image)]).spans[0].offset
    assert nudged.cached_tokens == offset // 16 * 16 > 0
    assert not torch.equal(first.logits, nudged.logits)


def _conversation(engine: Engine, turns: int = 6, reply_tokens: int = 4) -> tuple[list[list[int]], list[Any]]:
    messages: list[dict[str, Any]] = []
    replies: list[list[int]] = []
    outputs: list[Any] = []
    for t in range(turns):
        images = (picture(20 + t),) if t % 2 == 0 else (picture(20), picture(30 + t))  # repeats image 20
        messages.append(user_turn(f"turn {t}: describe the picture", *images))
        out = _run(engine, f"t{t}", messages, max_tokens=reply_tokens)
        replies.append([o.token_id for o in out])
        outputs.append(out)
        messages.append({"role": "assistant", "content": "".join(o.text for o in out)})
    return replies, outputs


@pytest.mark.parametrize("arch", ["qwen2-vl", "idefics3"])
def test_prefix_reuse_keeps_a_six_turn_conversation_identical(arch: str) -> None:
    tiny = tiny_model(arch)
    stateless = Engine(tiny, STATELESS)
    cached = Engine(tiny)
    plain, plain_out = _conversation(stateless)
    reused, reused_out = _conversation(cached)
    assert reused == plain  # greedy replies token for token
    for a, b in zip(plain_out, reused_out, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.allclose(x.logits, y.logits, atol=1e-5, rtol=0)
    cached_tokens = [out[0].cached_tokens for out in reused_out]
    assert cached_tokens[0] == 0 and all(c > 0 for c in cached_tokens[1:])
    assert all(
        c % 16 == 0 and c < out[0].prompt_tokens for c, out in zip(cached_tokens, reused_out, strict=True)
    )
    assert cached.stages.prefill_tokens < stateless.stages.prefill_tokens / 2
    # images wholly inside the reused prefix are not encoded again; new ones are
    assert cached.stages.encoded_items < stateless.stages.encoded_items


def test_reuse_that_ends_inside_an_image_writes_only_the_rest_of_its_features() -> None:
    """Idefics3's image run holds tile markers between its image tokens. A second question about
    the same image shares every block up to the one where the image ends and the text differs:
    the engine resumes inside the image and writes only the rest of its features."""
    tiny = tiny_model("idefics3")
    engine = Engine(tiny)
    image = picture(70)
    _run(engine, "a", [user_turn("describe the image", image)])
    question = [user_turn("count slowly", image)]
    again = _run(engine, "b", question, max_tokens=3)
    span = _layout(engine, question).spans[0]
    assert span.offset < again[0].cached_tokens < span.offset + span.length
    alone = _run(Engine(tiny, STATELESS), "c", question, max_tokens=3)
    assert [o.token_id for o in again] == [o.token_id for o in alone]
    assert torch.allclose(again[0].logits, alone[0].logits, atol=1e-5, rtol=0)
    assert engine.stages.encoded_items == 1  # the rest of the features came from the encoder cache


def test_kv_events_name_the_blocks_as_vllm_keys_them(tiny: VisionLanguageModel) -> None:
    engine = Engine(tiny, EngineConfig(prefix_cache_blocks=3))
    image = picture(40)
    out = _run(engine, "a", [user_turn("describe the image", image)], max_tokens=3)
    events = engine.drain_kv_events()
    stored = [e for e in events if isinstance(e, BlockStored)]
    layout = _layout(engine, [user_turn("describe the image", image)])
    expected = BlockHasher("sha256", 16).block_hashes(layout.token_ids, layout.spans)
    assert stored[0].block_hashes == expected and stored[0].parent_block_hash is None
    assert stored[0].token_ids == list(layout.token_ids[: len(expected) * 16])
    span = layout.spans[0]
    first_block = span.offset // 16
    assert stored[0].extra_keys[first_block] == [(span.identity, span.offset - first_block * 16)]
    assert out[-1].prompt_tokens == len(layout.token_ids)
    assert len(expected) == 3  # the cache is full
    # another image after the same system turn: its two leading blocks hit (and become the most
    # recently used), its third block evicts the first chat's, the least recently used
    second = _run(engine, "b", [user_turn("describe the image", picture(41))], max_tokens=1)
    assert second[0].cached_tokens == 32
    events = engine.drain_kv_events()
    assert [e for e in events if isinstance(e, BlockRemoved)] == [BlockRemoved([expected[2]])]
    assert [e.parent_block_hash for e in events if isinstance(e, BlockStored)] == [expected[1]]


def test_decode_batches_requests_without_changing_them(tiny: VisionLanguageModel) -> None:
    chats = [[user_turn("describe the image", picture(50 + i))] for i in range(3)]
    chats[1].insert(0, {"role": "user", "content": "a longer first turn so the rows differ in length"})
    alone = [_run(Engine(tiny), f"r{i}", chat, max_tokens=5) for i, chat in enumerate(chats)]
    engine = Engine(tiny)
    for i, chat in enumerate(chats):
        engine.add_request(GenerateRequest(f"r{i}", prompt_from_messages(chat), max_tokens=5))
    together: dict[str, list[StepOutput]] = {}
    while engine.has_unfinished():
        for o in engine.step():
            together.setdefault(o.request_id, []).append(o)
    assert engine.stages.decode_steps == 4 and engine.stages.decode_tokens == 12  # 3 rows per step
    for i, solo in enumerate(alone):
        batched = together[f"r{i}"]
        assert [o.token_id for o in batched] == [o.token_id for o in solo]
        assert all(
            torch.allclose(a.logits, b.logits, atol=1e-5, rtol=0) for a, b in zip(solo, batched, strict=True)
        )
