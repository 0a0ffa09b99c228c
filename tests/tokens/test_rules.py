"""Rules whose processors cannot run here (torch or remote code), llm-d's estimate, hosted APIs, errors.

Expected values are worked by hand in the comments or quoted from the documentation they cite.
"""

from __future__ import annotations

import pytest

from mmgate.errors import RequestError
from mmgate.tokens import (
    FAMILIES,
    Estimator,
    UnknownNameError,
    family_for_model,
    get_family,
    get_provider,
    parse_estimate,
)


# --- families checked by worked examples -----------------------------------------------------
def test_llama4_worked_examples() -> None:
    fam = get_family("llama4")
    # 336x336 fits one tile exactly (scale 1.0, smallest canvas): 144 tokens, no separators.
    assert fam.count_image(336, 336) == (144, 3)
    # 1920x1080: no canvas of ≤16 tiles upscales; the largest downscale is 3 rows x 5 columns
    # (min(1680/1920, 1008/1080) = 0.875), so 15 tiles + the global tile, 15 separators.
    assert fam.count_image(1920, 1080) == (16 * 144, 3 + 15)
    # 200 wide x 300 high: the 336x336 canvas upscales by min(1.68, 1.12) = 1.12; 672 high x 336 wide
    # reaches only min(1.68, 2.24) = 1.68 -> larger; the smallest upscale wins, so one tile.
    assert fam.count_image(200, 300) == (144, 3)


def test_phi3_5_vision_examples_from_reference_notes() -> None:
    fam = get_family("phi-3.5-vision")
    assert fam.count_image(1920, 1080).tokens == 757  # vllm.md §7, num_crops=4
    assert fam.with_params({"num_crops": 16}).count_image(1920, 1080).tokens == 2353


def test_phi4_multimodal_worked_example() -> None:
    # 1920x1080: 5x3 crops of 448 (≤36), resized to 2240x1260 + 84 px padding at the bottom:
    # mask 96x160 minus 84//14 = 6 rows -> 90x160, downsampled 45x80: 256 + 1 + 3600 + 45 + 16.
    assert get_family("phi-4-multimodal").count_image(1920, 1080).tokens == 3918
    # audio: 10 s = 160000 samples -> (160000-400)//160+1 = 998 frames -> ceil(998/8) = 125
    assert get_family("phi-4-multimodal").count_audio(10).tokens == 125


def test_whisper_is_1500_per_started_30s_window() -> None:
    fam = get_family("whisper")
    assert [fam.count_audio(d).tokens for d in (0.5, 10, 30, 30.5, 60, 61)] == [
        1500,
        1500,
        1500,
        3000,
        3000,
        4500,
    ]


def test_reference_examples_for_1920x1080() -> None:
    """The 1920x1080 examples quoted in reference/vllm.md §7."""
    expected = {
        "qwen2-vl": 2691,
        "qwen3-vl": 2040,
        "idefics3": 2197,
        "llava-next": 1948,
        "internvl": 2304,
        "pixtral": 2304,
        "llava-1.5": 576,
        "gemma3": 256,
    }
    for name, tokens in expected.items():
        assert get_family(name).count_image(1920, 1080).tokens == tokens, name
    gemma4 = get_family("gemma4")
    budgets = [
        gemma4.with_params({"max_soft_tokens": b}).count_image(1920, 1080).tokens
        for b in (70, 140, 280, 560, 1120)
    ]
    assert budgets == [66, 120, 264, 527, 1100]


def test_qwen3_vl_issue_example() -> None:
    assert get_family("qwen3-vl").count_image(1280, 720).tokens == 880


# --- llm-d estimate ---------------------------------------------------------------------------
def test_estimate_defaults_follow_llmd() -> None:
    est = Estimator()
    assert est.image(640, 360).tokens == 225 and est.image(1280, 720).tokens == 900
    assert est.image(None, None).tokens == 225  # defaultResolution 640x360
    assert est.image(10, 10).tokens == 1  # floor of 1
    assert est.video(None, None, None, None).tokens == 20 * 225  # 10 s x 2 fps, 640x360 frames
    assert est.audio(None).tokens == 14 + 125  # overhead + 12.5/s x 10 s


def test_estimate_video_modes() -> None:
    qwen_like = Estimator(
        parse_estimate(
            {
                "video": {
                    "frames": {
                        "mode": "sampled",
                        "minFrames": 4,
                        "maxFrames": 768,
                        "sampled": {"sampleFPS": 2, "temporalPatchSize": 2},
                    },
                    "tokensPerFrame": {"mode": "dynamic", "dynamic": {"factor": 1024}},
                }
            }
        )
    )
    assert qwen_like.video(1280, 720, 10.0, None).tokens == (20 // 2) * 900
    assert qwen_like.video(1280, 720, 0.5, None).tokens == (4 // 2) * 900  # minFrames floor, then merge
    gemma_like = Estimator(
        parse_estimate(
            {
                "video": {
                    "frames": {
                        "mode": "strided",
                        "maxFrames": 32,
                        "strided": {"defaultSourceFPS": 30, "frameStride": 15},
                    },
                    "tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 70}},
                    "maxVideoTokens": 1000,
                }
            }
        )
    )
    assert gemma_like.video(None, None, 6.0, None).tokens == (180 // 15) * 70  # 12 frames
    assert (
        gemma_like.video(None, None, 2.0, 60.0).tokens == (120 // 15) * 70
    )  # header fps overrides the default
    assert gemma_like.video(None, None, 60.0, None).tokens == 1000  # 32 x 70 capped by maxVideoTokens


def test_estimate_config_is_strict() -> None:
    with pytest.raises(ValueError, match="staticTokens"):
        parse_estimate({"image": {"mode": "static", "static": {"staticTokens": 5}}})
    with pytest.raises(ValueError, match="mode"):
        parse_estimate({"image": {"mode": "exact"}})


# --- hosted APIs --------------------------------------------------------------------------------
def test_anthropic() -> None:
    claude = get_provider("anthropic")
    assert claude.image(1280, 720, None) == (46 * 26, 3)  # ceil(1280/28) x ceil(720/28), +3
    assert claude.image(200, 200, None) == (64, 3)
    big = claude.image(4000, 3000, None)  # long edge to 2576 -> 92x69 = 6348 patches > 4784: shrink
    assert 4600 < big.tokens <= 4784
    assert claude.image(8000, 40, None).tokens == 92 * 1  # 2576x12 after the long-edge cap


def test_openai_tile_models_documented_examples() -> None:
    gpt4o = get_provider("openai:gpt-4o")
    assert gpt4o.image(1024, 1024, None).tokens == 765  # 768x768 -> 4 tiles: 85 + 4*170
    assert gpt4o.image(2048, 4096, None).tokens == 1105  # 1024x2048 -> 768x1536: 6 tiles
    assert gpt4o.image(4096, 8192, "low").tokens == 85
    assert get_provider("openai:gpt-4o-mini").image(1024, 1024, None).tokens == 2833 + 4 * 5667


def test_openai_patch_models_documented_examples() -> None:
    mini = get_provider("openai:gpt-4.1-mini")
    assert mini.image(1024, 1024, None).tokens == 1659  # 1024 patches x 1.62 = 1658.88, rounded up
    assert mini.image(1800, 2400, None).tokens == 2353  # shrunk to 33x44 = 1452 patches x 1.62
    assert get_provider("openai:gpt-5.5").image(1024, 1024, None).tokens == 1229  # x1.2
    assert get_provider("openai:gpt-6-astra").image(1800, 2400, None).tokens == 1743  # 1452 x 1.2 = 1742.4


def test_gemini() -> None:
    gem = get_provider("gemini")
    assert gem.image(384, 384, None).tokens == 258
    assert gem.image(1920, 1080, None).tokens == 3 * 2 * 258
    assert gem.audio is not None and gem.audio(10).tokens == 320


def test_unknown_provider_and_model_name_the_choices() -> None:
    with pytest.raises(UnknownNameError, match="gpt-4o"):
        get_provider("openai:gpt-9")
    with pytest.raises(UnknownNameError, match="anthropic"):
        get_provider("mistral")


# --- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(0, 10), (10, -1), (70_000, 10), (1.5, 10), (True, 10)])
def test_bad_sizes_are_refused_for_every_image_family(size: tuple[object, object]) -> None:
    for fam in FAMILIES.values():
        if fam.image is not None:
            with pytest.raises(RequestError, match=r"width|height"):
                fam.count_image(*size)  # type: ignore[arg-type]


def test_bad_durations() -> None:
    for d in (0, -1, float("nan"), 1e9):
        with pytest.raises(RequestError, match="duration"):
            get_family("whisper").count_audio(d)


def test_unknown_family_names_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        get_family("gpt-vision")
    for name in ("qwen3-vl", "gemma4", "whisper", "llava-next"):
        assert name in str(err.value)


def test_modality_a_family_lacks_is_a_clear_error() -> None:
    with pytest.raises(UnknownNameError, match="no audio rule"):
        get_family("llava-1.5").count_audio(3)


def test_param_values_are_coerced_or_refused() -> None:
    fam = get_family("gemma3").with_params({"do_pan_and_scan": "true", "pan_and_scan_max_num_crops": "2"})
    assert fam.count_image(2000, 400).tokens == 3 * 256
    with pytest.raises(UnknownNameError, match=r"expected int"):
        get_family("qwen3-vl").with_params({"max_pixels": "lots"})
    with pytest.raises(ValueError, match="max_soft_tokens=100 do not work"):
        get_family("gemma4").with_params({"max_soft_tokens": 100})
    with pytest.raises(ValueError, match="do not work"):
        get_family("qwen2-vl").with_params({"patch_size": 0})
    with pytest.raises(ValueError, match="must not be negative"):
        get_family("llava-next").with_params({"image_size": -336})


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl"),
        ("Qwen/Qwen2-VL-2B-Instruct", "qwen2-vl"),
        ("Qwen/Qwen3-VL-32B-Instruct", "qwen3-vl"),
        ("Qwen/Qwen2.5-Omni-7B", "qwen2.5-omni"),
        ("qwen2.5-omni-7b-h100", "qwen2.5-omni"),  # a simulator profile name
        ("google/gemma-3-27b-it", "gemma3"),
        ("llava-hf/llava-v1.6-mistral-7b-hf", "llava-next"),
        ("llava-hf/llava-1.5-7b-hf", "llava-1.5"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4"),
        ("openai/whisper-large-v3", "whisper"),
        ("HuggingFaceTB/SmolVLM-256M-Instruct", "smolvlm"),
        ("qwen3-vl-32b-h200-tp2", "qwen3-vl"),  # a simulator profile name
        ("meta-llama/Llama-3.1-8B-Instruct", None),
    ],
)
def test_served_model_ids_map_to_their_family(model: str, family: str | None) -> None:
    assert family_for_model(model) == family
