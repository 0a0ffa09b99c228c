"""Per-modality encoder and processor costs (``modalities`` in a profile): an omni model's audio
tower and its audio and video processors are priced apart from the vision encoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.sim.core import Engine, EngineConfig, MediaSpan, SimRequest
from mmgate.sim.profiles import ProfileError, load_profile
from support.processes import REPO
from support.sim_core import IMG, serve

OMNI = "qwen2.5-omni-7b-h100"


def _one_item(rid: str, modality: str, tokens: int, identity: str | None = None) -> SimRequest:
    ids = [1] * 10 + [IMG] * tokens + [2] * 10
    return SimRequest(rid, ids, [MediaSpan(identity or rid, 10, tokens, modality)], max_tokens=2)


def _encoder_seconds(engine: Engine, request: SimRequest) -> float:
    return sum(s.encoder_seconds for s in serve(engine, request).steps)


def test_each_modality_is_encoded_by_its_own_tower() -> None:
    profile = load_profile(OMNI)
    engine = Engine(profile)
    got = {m: _encoder_seconds(engine, _one_item(m, m, 752)) for m in ("image", "video", "audio")}
    towers = profile.modality_encoders()
    assert got["image"] == pytest.approx(profile.encoder.ms(752) / 1000)
    assert got["video"] == pytest.approx(towers["video"].ms(752) / 1000)
    assert got["audio"] == pytest.approx(towers["audio"].ms(752) / 1000)
    assert got["audio"] < got["video"] < got["image"]  # windowed audio attention; no clip-wide t^2


def test_a_profile_without_modalities_prices_audio_like_an_image() -> None:
    engine = Engine("fast")
    assert _encoder_seconds(engine, _one_item("a", "audio", 64)) == pytest.approx(
        _encoder_seconds(engine, _one_item("i", "image", 64))
    )


def test_the_processor_cost_and_cache_size_follow_the_modality() -> None:
    profile = load_profile(OMNI)
    engine = Engine(profile, EngineConfig(mm_processor_cache_gb=0))
    audio_pre, audio_bytes = profile.preprocess_for("audio")
    assert engine.preprocess(_one_item("a", "audio", 250), 0.0) == pytest.approx(audio_pre.ms(250) / 1000)
    assert engine.preprocess(_one_item("i", "image", 250), 10.0) == pytest.approx(
        profile.preprocess.ms(250) / 1000
    )
    assert profile.preprocess_for("image") == (profile.preprocess, profile.preprocess.bytes_per_token)
    # the audio processor pads every clip to its five-minute window: a fixed cost per item
    assert audio_pre.ms(25) == audio_pre.ms(7500) > profile.preprocess.ms(1198)
    # processed audio is far smaller per token than an image's patches: a processor cache that
    # holds two 500-token clips holds no 500-token image
    assert audio_bytes < profile.preprocess.bytes_per_token
    cache_gb = 2.5 * 500 * audio_bytes / (1 << 30)
    cached = Engine(profile, EngineConfig(mm_processor_cache_gb=cache_gb))
    for rid in ("a", "b", "a"):
        cached.preprocess(_one_item(rid, "audio", 500), 0.0)
    assert cached.stats().processor_cache_hits == 1
    for rid in ("x", "y", "x"):
        cached.preprocess(_one_item(rid, "image", 500), 0.0)
    assert cached.stats().processor_cache_hits == 1


def test_modalities_are_decoded_strictly(tmp_path: Path) -> None:
    text = (REPO / "src/mmgate/sim/profiles/fast.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "modalities:\n  audoi:\n    encoder: {c0_ms: 1.0}\n")
    with pytest.raises(ProfileError, match=r"modalities\.audoi is not a modality.*audio"):
        load_profile(bad)
    bad.write_text(text + "modalities:\n  audio:\n    encodr: {c0_ms: 1.0}\n")
    with pytest.raises(ProfileError, match="encodr"):
        load_profile(bad)
    good = tmp_path / "good.yaml"
    good.write_text(text + "modalities:\n  audio:\n    encoder: {c0_ms: 1.0}\n")
    profile = load_profile(good)
    assert profile.modality_encoders()["audio"].ms(1000) == 1.0
    assert profile.preprocess_for("audio") == (profile.preprocess, profile.preprocess.bytes_per_token)
