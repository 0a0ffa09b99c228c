"""Timing profiles: shipped files load, strict decoding, KV arithmetic, fitting helper."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.sim.engine import Engine, EngineConfig
from mmgate.sim.profiles import ProfileError, available_profiles, fit_poly, load_profile
from support.processes import REPO

SHIPPED = {"fast", "qwen2-vl-2b-rtx4060", "smolvlm-256m-rtx4060", "qwen3-vl-32b-h200-tp2"}


def test_shipped_profiles_load_and_run() -> None:
    assert set(available_profiles()) >= SHIPPED
    for name in SHIPPED:
        profile = load_profile(name)
        assert profile.name == name and profile.sources
        assert Engine(profile).num_gpu_blocks > 100


def test_h200_kv_capacity_is_the_issue_memory_arithmetic() -> None:
    profile = load_profile("qwen3-vl-32b-h200-tp2")
    per_token = 64 * 8 * 128 * 2 * 2
    tokens = int((2 * 141 * 0.95 - 66) * 1e9 // per_token)
    assert profile.engine.kv_capacity_tokens() == tokens
    assert profile.num_gpu_blocks() == tokens // 16
    assert Engine(profile, EngineConfig(block_size=64)).num_gpu_blocks == tokens // 64
    # Peak prefill: a full 8192-token chunk runs at about 15,751 tokens/s.
    s = profile.step
    n = 8192
    ms = s.base_ms + s.prefill_fixed_ms + n * s.prefill_ms_per_token + s.prefill_attention_ms * n * n / 2
    assert n / ms * 1000 == pytest.approx(15_751, rel=0.01)
    assert profile.encoder.ms(880) == pytest.approx(25, rel=0.05)


def test_smolvlm_stage_times() -> None:
    profile = load_profile("smolvlm-256m-rtx4060")
    assert profile.preprocess.ms(832) == pytest.approx(301, rel=0.01)
    assert profile.preprocess.ms(64) == pytest.approx(22, rel=0.01)
    assert profile.encoder.ms(832) == pytest.approx(173, rel=0.01)
    assert profile.encoder.ms(64) == pytest.approx(25, rel=0.01)


def test_profile_from_path_and_strict_errors(tmp_path: Path) -> None:
    text = (REPO / "src/mmgate/sim/profiles/fast.yaml").read_text()
    good = tmp_path / "mine.yaml"
    good.write_text(text.replace("name: fast", "name: mine"))
    assert load_profile(good).name == "mine"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("base_ms:", "bsae_ms:"))
    with pytest.raises(ProfileError, match="bsae_ms"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="qwen2-vl-2b-rtx4060"):
        load_profile("no-such-profile")
    both = tmp_path / "both.yaml"
    both.write_text(
        text.replace(
            "kv_tokens: 65536",
            "kv_tokens: 65536\n  kv_memory: {gpu_memory_gb: 8, utilization: 0.9, weights_gb: 1,"
            " kv_bytes_per_token: 1000}",
        )
    )
    with pytest.raises(ProfileError, match="not both"):
        load_profile(both)


def test_fit_poly() -> None:
    c0, c1, c2 = fit_poly([(96, 46), (384, 156), (1536, 884)])
    for x, y in [(96, 46), (384, 156), (1536, 884)]:
        assert c0 + c1 * x + c2 * x * x == pytest.approx(y)
    a, b = fit_poly([(0, 1.0), (1, 3.1), (2, 4.9)], degree=1)
    assert (a, b) == (pytest.approx(1.05), pytest.approx(1.95))
    with pytest.raises(ValueError):
        fit_poly([(1, 1), (1, 2), (1, 3)])


def test_the_tp2_profile_encodes_on_both_gpus_in_data_mode() -> None:
    profile = load_profile("qwen3-vl-32b-h200-tp2")
    assert profile.encoder_for("weights") == (profile.encoder, 1)
    assert profile.encoder_for("data") == (profile.encoder, 2)
