"""Timing profiles: shipped files load, strict decoding, KV arithmetic, fitting helper."""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp
import orjson
import pytest

from mmgate.sim.core import Engine, EngineConfig
from mmgate.sim.fleet import SimFleet
from mmgate.sim.profiles import ProfileError, available_profiles, fit_poly, load_profile
from mmgate.sim.spec import DEFAULT_EC_TRANSFER_S, DEFAULT_KV_TRANSFER_S, PodSpec, transfer_times
from support.media import wav
from support.processes import REPO
from support.stack import chat_body, png

SHIPPED = {
    "fast",
    "qwen2-vl-2b-rtx4060",
    "smolvlm-256m-rtx4060",
    "qwen3-vl-32b-h200-tp2",
    "qwen3-vl-4b-a100",
    "qwen3-vl-8b-h100",
    "qwen3-vl-32b-encoder-l4",
    "qwen2.5-omni-7b-h100",
}


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


@pytest.mark.parametrize(
    ("name", "gb", "weights_gb", "reserved_gb", "encode_720p_ms", "prefill_tokens_s", "batch"),
    [
        ("qwen3-vl-4b-a100", 85.9, 8.87, 3.0, 30.3, 21_470, (2048, 256)),
        ("qwen3-vl-8b-h100", 85.5, 17.53, 5.0, 13.9, 35_600, (8192, 1024)),
    ],
)
def test_the_arithmetic_profiles_say_what_their_sources_derive(
    name: str,
    gb: float,
    weights_gb: float,
    reserved_gb: float,
    encode_720p_ms: float,
    prefill_tokens_s: float,
    batch: tuple[int, int],
) -> None:
    profile = load_profile(name)
    per_token = 36 * 8 * 128 * 2 * 2  # both LMs: 36 layers, 8 KV heads of 128
    assert profile.engine.kv_capacity_tokens() == int(
        (gb * 0.9 - weights_gb - reserved_gb) * 1e9 // per_token
    )
    assert (profile.engine.max_num_batched_tokens, profile.engine.max_num_seqs) == batch
    assert profile.encoder.ms(880) == pytest.approx(encode_720p_ms, rel=0.01)  # a 1280x720 image
    assert 1000 / profile.step.prefill_ms_per_token == pytest.approx(prefill_tokens_s, rel=0.01)
    assert profile.transfer is not None and profile.transfer.kv_bytes_per_token == per_token
    t = profile.transfer
    for path, rate in (("shared-memory", t.shared_memory_gb_per_s), ("network", t.network_gb_per_s)):
        ec, kv = t.seconds_per_token(path)
        assert (ec, kv) == pytest.approx((t.ec_bytes_per_token / rate / 1e9, per_token / rate / 1e9))
    assert profile.encoder_for("data") == (profile.encoder, 1)  # one GPU: nothing to split over


def test_the_omni_profile_says_what_its_sources_derive() -> None:
    profile = load_profile("qwen2.5-omni-7b-h100")
    per_token = 28 * 4 * 128 * 2 * 2  # Qwen2.5-7B: 28 layers, 4 KV heads of 128
    assert profile.engine.kv_capacity_tokens() == int((85.5 * 0.9 - 17.86 - 5.0) * 1e9 // per_token)
    assert profile.engine.max_model_len == 32_768
    assert 1000 / profile.step.prefill_ms_per_token == pytest.approx(37_890, rel=0.01)
    assert profile.encoder.ms(1198) == pytest.approx(18.9, rel=0.01)  # a 1280x720 image
    towers = profile.modality_encoders()
    assert set(towers) == {"video", "audio"}
    assert towers["audio"].ms(752) == pytest.approx(6.9, rel=0.02)  # 30 s of audio
    assert (towers["audio"].ms(1502) - towers["audio"].ms(752)) / 30 == pytest.approx(0.163, rel=0.01)
    assert profile.transfer is not None and profile.transfer.kv_bytes_per_token == per_token


def test_a_pods_transfer_times_come_from_its_own_settings_then_its_profile() -> None:
    a100 = load_profile("qwen3-vl-4b-a100")
    assert a100.transfer is not None
    ec, kv = a100.transfer.seconds_per_token("network")
    assert transfer_times(PodSpec(profile=a100.name), a100) == (kv, ec)
    ec, kv = a100.transfer.seconds_per_token("shared-memory")
    assert transfer_times(PodSpec(profile=a100.name, transfer_path="shared-memory"), a100) == (kv, ec)
    assert transfer_times(PodSpec(kv_transfer_s_per_token=1e-3), a100)[0] == 1e-3
    fast = load_profile("fast")  # no transfer section: the simulator's defaults
    assert transfer_times(PodSpec(), fast) == (DEFAULT_KV_TRANSFER_S, DEFAULT_EC_TRANSFER_S)
    with pytest.raises(ValueError, match="transfer_path must be one of"):
        PodSpec(transfer_path="carrier-pigeon").validate()


@pytest.mark.parametrize("name", ["qwen3-vl-4b-a100", "qwen3-vl-8b-h100", "qwen2.5-omni-7b-h100"])
async def test_the_arithmetic_profiles_serve_over_http(name: str) -> None:
    async with SimFleet([PodSpec(profile=name, time_scale=0.05)]) as fleet:
        pod = fleet.pods[0]
        body = chat_body(pod.model, "what is this?", [png(1)], max_tokens=3)
        async with (
            aiohttp.ClientSession() as session,
            session.post(pod.url + "/v1/chat/completions", data=body) as r,
        ):
            assert r.status == 200
            answer = await r.json()
        assert answer["usage"]["completion_tokens"] == 3 and pod.model == load_profile(name).model


async def test_the_omni_profile_prices_audio_at_25_tokens_a_second_over_http() -> None:
    async with SimFleet([PodSpec(profile="qwen2.5-omni-7b-h100", time_scale=0.05)]) as fleet:
        pod = fleet.pods[0]
        prompts = []
        for seconds in (2.0, 6.0):
            audio = {"data": base64.b64encode(wav(seconds)).decode(), "format": "wav"}
            content = [
                {"type": "text", "text": "what is said?"},
                {"type": "input_audio", "input_audio": audio},
            ]
            body = orjson.dumps({"model": pod.model, "messages": [{"role": "user", "content": content}]})
            async with (
                aiohttp.ClientSession() as session,
                session.post(pod.url + "/v1/chat/completions", data=body) as r,
            ):
                assert r.status == 200
                prompts.append((await r.json())["usage"]["prompt_tokens"])
        assert prompts[1] - prompts[0] == 100  # 4 more seconds of audio: 100 more embeddings


def test_the_l4_encoder_profile_is_the_h200_one_scaled_by_the_hardware_ratios() -> None:
    """Compute-bound terms by the tensor FLOPs ratio (989 / 121 TFLOPS), as its sources say."""
    l4, h200 = load_profile("qwen3-vl-32b-encoder-l4"), load_profile("qwen3-vl-32b-h200-tp2")
    ratio = 989 / 121
    assert l4.encoder.c1_ms_per_token == pytest.approx(h200.encoder.c1_ms_per_token * ratio, rel=1e-3)
    assert l4.encoder.c2_ms_per_token2 == pytest.approx(h200.encoder.c2_ms_per_token2 * ratio, rel=1e-3)
    assert (
        l4.tensor_parallel_size == 1
        and l4.sources
        and "ESTIMATES" in (REPO / "src/mmgate/sim/profiles/qwen3-vl-32b-encoder-l4.yaml").read_text()
    )
