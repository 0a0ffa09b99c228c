"""The frontend: media load, the processor cache and the worker queue."""

from __future__ import annotations

import dataclasses

import pytest

from mmgate.sim.core import Engine, EngineConfig, MediaPayload
from mmgate.sim.core.media import decode_ms, hash_ms, load_ms
from support.sim_core import drain, mm_request

H200 = "qwen3-vl-32b-h200-tp2"
PHOTO = MediaPayload(base64_bytes=274_000, file_bytes=205_500, pixels=1280 * 720, fmt="jpeg")


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


def _with_photo(rid: str, identity: str, text: int = 8) -> object:
    return dataclasses.replace(mm_request(rid, text, identity, tokens=882), media=(PHOTO,))


def test_media_load_is_paid_on_processor_cache_hits_too() -> None:
    engine = Engine(H200)
    load = load_ms(engine.profile.media_load, PHOTO) / 1000
    assert load > 0.001  # a 720p JPEG takes milliseconds of a CPU core
    first = engine.preprocess(_with_photo("a", "photo"), 0.0)
    again = engine.preprocess(_with_photo("b", "photo"), 10.0)
    assert first == pytest.approx(load + engine.profile.preprocess.ms(882) / 1000)
    assert again == pytest.approx(load)
    assert engine.stats().processor_cache_hits == 1


def test_media_decodes_at_once_and_the_hash_and_processor_queue_on_one_worker() -> None:
    """vLLM decodes media parts on 8 loading threads and hashes them (with the HF processor) on
    one worker: a burst of hits decodes together and queues only for the hashes; a ninth part
    waits for a free loading thread."""
    engine = Engine(H200)
    engine.preprocess(_with_photo("warm", "photo"), 0.0)
    decode = decode_ms(engine.profile.media_load, PHOTO) / 1000
    digest = hash_ms(engine.profile.media_load, PHOTO) / 1000
    assert decode > 10 * digest > 0  # the decode dominates: a 720p JPEG, milliseconds of a core
    burst = [engine.preprocess(_with_photo(f"r{i}", "photo"), 10.0) for i in range(9)]
    assert burst[:8] == pytest.approx([decode + (i + 1) * digest for i in range(8)])
    assert burst[8] == pytest.approx(2 * decode + digest)  # its decode starts when a thread frees


def test_a_request_without_media_never_waits_for_the_front_end() -> None:
    engine = Engine("qwen2.5-omni-7b-h100", EngineConfig(mm_processor_cache_gb=0))
    busy = engine.preprocess(_clip("c", 3060), 0.0)
    assert busy > 0.2  # the clip's frames and its processor
    assert engine.preprocess(mm_request("text", 64, None), 0.0) == 0.0


def test_a_clips_frame_decode_is_paid_on_processor_cache_hits_too() -> None:
    engine = Engine("qwen2.5-omni-7b-h100")
    costs = engine.profile.modalities["video"]
    assert costs.load is not None and costs.preprocess is not None
    first = engine.preprocess(_clip("a", 3060), 0.0)
    again = engine.preprocess(_clip("b", 3060), 10.0)  # the same clip: a processor-cache hit
    frames = costs.load.ms(3060) / 1000
    assert again == pytest.approx(
        decode_ms(engine.profile.media_load, CLIP) / 1000 + frames + _clip_hash(engine)
    )
    assert first == pytest.approx(again + costs.preprocess.ms(3060) / 1000)
    assert engine.stats().processor_cache_hits == 1


def test_a_request_loaded_early_takes_the_processor_before_one_still_loading() -> None:
    """A clip takes ~0.2 s to decode; a small image sent just after it is loaded within
    milliseconds and is processed while the clip still decodes, not after it."""
    engine = Engine("qwen2.5-omni-7b-h100", EngineConfig(mm_processor_cache_gb=0))
    clip = engine.preprocess(_clip("c", 3060), 0.0)
    photo = engine.preprocess(_with_photo("p", "photo"), 0.001)
    assert photo < 0.05 < clip


CLIP = MediaPayload(modality="video", base64_bytes=2_000_000, file_bytes=1_500_000)


def _clip(rid: str, tokens: int) -> object:
    req = mm_request(rid, 8, "clip", tokens=tokens)
    items = [dataclasses.replace(m, modality="video") for m in req.mm_items]
    return dataclasses.replace(req, mm_items=items, media=(CLIP,))


def _clip_hash(engine: Engine) -> float:
    return hash_ms(engine.profile.media_load, CLIP) / 1000


def test_a_full_cache_hit_is_no_faster_than_the_front_end_and_one_step() -> None:
    """Every cache warm, the second request still pays its media load and a forward step."""
    engine = Engine(H200)
    t = engine.profile.step
    ttfts = []
    now = 0.0
    for rid in ("first", "again"):
        req = _with_photo(rid, "photo", text=64)
        start = now
        now += engine.preprocess(req, now)
        engine.add_request(req, now)
        run = drain(engine)
        first_step = next(i for i, s in enumerate(run.steps) if s.first_token)
        ttfts.append(now - start + sum(s.duration for s in run.steps[: first_step + 1]))
        now += run.now
    assert engine.stats().encoder_cache_hits + engine.stats().prefix_cache_hits > 0
    floor = load_ms(engine.profile.media_load, PHOTO) / 1000 + (t.base_ms + t.prefill_fixed_ms) / 1000
    assert ttfts[1] < ttfts[0]
    assert ttfts[1] >= floor
