"""mmgate's family rules against the real Hugging Face processors, size by size.

Every family whose processor runs here without torch is checked on ≥200 sizes from 1 px to 8K
(exact equality, and: where the processor refuses a size, mmgate refuses it too). A few small
images also go through full pixel preprocessing to show the counting methods agree with it.

The reference counts come from Hugging Face's own processors, and for several families only an
underscored method computes them (``_get_num_multimodal_tokens``, ``_compute_audio_num_tokens``,
``_process_audio``): the public ``__call__`` needs pixels, audio samples and a tokenizer, which is
what vLLM itself calls for the count. These are transformers' internals used as the reference, not
mmgate's private state; a transformers release that renames one fails here loudly.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from PIL import Image
from transformers.image_utils import SizeDict
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.idefics3.processing_idefics3 import Idefics3Processor
from transformers.models.internvl.processing_internvl import InternVLProcessor
from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil
from transformers.models.llava.processing_llava import LlavaProcessor
from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor
from transformers.models.pixtral.image_processing_pil_pixtral import (
    PixtralImageProcessorPil,
    get_resize_output_image_size,
)
from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor
from transformers.models.qwen2_audio.processing_qwen2_audio import Qwen2AudioProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil
from transformers.models.whisper.feature_extraction_whisper import WhisperFeatureExtractor
from transformers.video_utils import VideoMetadata

from mmgate.errors import RequestError
from mmgate.tokens import get_family
from mmgate.tokens.families.llama4 import supported_canvases
from mmgate.tokens.families.phi import Phi4MMParams, closest_grid
from support.hfref import (
    bare,
    load_without_torch,
    qwen2_video_module,
    qwen3_video_module,
    random_sizes,
    zeros_image,
)

SIZES = random_sizes(260, seed=20261130)
assert len(SIZES) >= 200


def check_all(family: str, reference: Any, total: bool = False, **params: object) -> int:
    """Compare ``reference(width, height)`` with mmgate for every size; returns how many compared."""
    fam = get_family(family).with_params(params)
    compared = 0
    for w, h in SIZES:
        try:
            expected = reference(w, h)
        except ValueError:
            with pytest.raises(RequestError):
                fam.count_image(w, h)
            continue
        got = fam.count_image(w, h)
        assert (got.total if total else got.tokens) == expected, f"{family} {w}x{h}"
        compared += 1
    return compared


QWEN_HUB = {"min_pixels": 3136, "max_pixels": 12_845_056}


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen2.5-vl", "qwen2.5-omni"])
def test_qwen2_vl_images(family: str) -> None:
    proc = Qwen2VLImageProcessorPil(**QWEN_HUB)
    n = check_all(family, lambda w, h: proc.get_number_of_image_patches(h, w) // 4)
    assert n >= 200


def test_qwen3_vl_images() -> None:
    proc = Qwen2VLImageProcessorPil(size={"shortest_edge": 65_536, "longest_edge": 16_777_216}, patch_size=16)
    assert check_all("qwen3-vl", lambda w, h: proc.get_number_of_image_patches(h, w) // 4) >= 200


def test_qwen_overrides_use_processor_names() -> None:
    proc = Qwen2VLImageProcessorPil(min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28)
    n = check_all(
        "qwen2-vl",
        lambda w, h: proc.get_number_of_image_patches(h, w) // 4,
        min_pixels=256 * 28 * 28,
        max_pixels=1280 * 28 * 28,
    )
    assert n >= 200


def test_qwen_full_preprocessing_agrees_on_small_images() -> None:
    proc = Qwen2VLImageProcessorPil(**QWEN_HUB)
    fam = get_family("qwen2-vl")
    for w, h in [(1, 1), (30, 90), (300, 200), (517, 33)]:
        grid = proc(images=[Image.new("RGB", (w, h))])["image_grid_thw"][0]
        assert int(np.prod(grid)) // 4 == fam.count_image(w, h).tokens


def _video_cases(seed: int, n: int) -> list[tuple[int, float, int, int]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        fps = float(rng.choice([8, 12.5, 23.976, 24, 25, 29.97, 30, 60]))
        frames = int(rng.integers(2, 4000))
        w, h = SIZES[int(rng.integers(len(SIZES)))]
        w, h = max(w, 16), max(h, 16)
        if max(w, h) / min(w, h) > 150:
            w = h = 640
        cases.append((frames, fps, w, h))
    return cases


def test_qwen3_vl_video_matches_sample_frames_and_patch_count() -> None:
    mod = qwen3_video_module()
    # the hub's video_preprocessor_config.json size for Qwen3-VL
    proc = bare(mod.Qwen3VLVideoProcessor, size={"shortest_edge": 4096, "longest_edge": 25_165_824})
    fam = get_family("qwen3-vl")
    for frames, fps, w, h in _video_cases(7, 220):
        meta = VideoMetadata(total_num_frames=frames, fps=fps, width=w, height=h)
        sampled = len(mod.Qwen3VLVideoProcessor.sample_frames(proc, meta))
        expected = mod.Qwen3VLVideoProcessor.get_num_of_video_patches(proc, sampled, h, w) // 4
        assert fam.count_video(w, h, frames / fps, fps).tokens == expected, (frames, fps, w, h)


# Qwen2_5OmniProcessor's own videos_kwargs size: what it passes the video processor for every clip.
OMNI_VIDEO_SIZE = {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}


@pytest.mark.parametrize(
    ("family", "videos_kwargs"), [("qwen2-vl", {}), ("qwen2.5-omni", {"size": OMNI_VIDEO_SIZE})]
)
def test_qwen2_vl_video_matches_sample_frames_and_patch_count(
    family: str, videos_kwargs: dict[str, Any]
) -> None:
    mod = qwen2_video_module()
    proc = bare(mod.Qwen2VLVideoProcessor, num_frames=None)
    fam = get_family(family)
    for frames, fps, w, h in _video_cases(11, 200):
        meta = VideoMetadata(total_num_frames=frames, fps=fps, width=w, height=h)
        sampled = len(mod.Qwen2VLVideoProcessor.sample_frames(proc, meta, fps=2))
        patches = mod.Qwen2VLVideoProcessor.get_num_of_video_patches(proc, sampled, h, w, videos_kwargs)
        assert fam.count_video(w, h, frames / fps, fps) == (patches // 4, 2), (frames, fps, w, h)


def test_qwen2_5_omni_audio_matches_the_processor_to_its_five_minute_window() -> None:
    # the hub's preprocessor_config.json: chunk_length 300 -> n_samples 4,800,000, nb_max_frames 30,000
    extractor = WhisperFeatureExtractor(chunk_length=300)
    proc = bare(Qwen2_5OmniProcessor, feature_extractor=extractor)
    fam = get_family("qwen2.5-omni")
    samples_cases = [1, 159, 160, 161, 16_000, 100_000, 480_000, 480_001, 1_600_000, 4_799_999, 4_800_000]
    for samples in [*samples_cases, 6_000_000]:
        expected = Qwen2_5OmniProcessor._get_num_audio_tokens(proc, samples)
        assert fam.count_audio(samples / 16_000) == (expected, 2), samples
    assert fam.count_audio(60.0).tokens == 1500  # 25 a second, past Qwen2-Audio's 30-s cap
    assert fam.count_audio(600.0).tokens == 7500


def test_qwen2_5_omni_audio_count_agrees_with_the_feature_extractors_mask() -> None:
    """The counting shortcut against the real feature extraction: the attention mask the padded
    five-minute spectrogram carries, through the tower's output-length formula."""
    extractor = WhisperFeatureExtractor(chunk_length=300)
    fam = get_family("qwen2.5-omni")
    for samples in [16_000, 37_123, 160_000]:
        out = extractor(
            np.zeros(samples, dtype=np.float32),
            sampling_rate=16_000,
            padding="max_length",
            return_attention_mask=True,
        )
        frames = int(out["attention_mask"].sum())
        assert fam.count_audio(samples / 16_000).tokens == ((frames - 1) // 2 + 1 - 2) // 2 + 1


PAS = {
    "pan_and_scan_min_crop_size": 256,
    "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_ratio_to_activate": 1.2,
}


def test_gemma3_pan_and_scan_crops() -> None:
    proc = Gemma3ImageProcessorPil()
    n = check_all(
        "gemma3",
        lambda w, h: 256 * (1 + len(proc.pan_and_scan(zeros_image(h, w), **PAS))),
        do_pan_and_scan=True,
    )
    assert n >= 200
    assert get_family("gemma3").count_image(7680, 1080).tokens == 256  # off by default


def test_gemma3_full_preprocessing_crops() -> None:
    proc = Gemma3ImageProcessorPil()
    fam = get_family("gemma3").with_params({"do_pan_and_scan": True})
    for w, h in [(900, 300), (300, 1000), (500, 480)]:
        out = proc(images=[Image.new("RGB", (w, h))], do_pan_and_scan=True, **PAS)
        assert 256 * (1 + int(out["num_crops"][0])) == fam.count_image(w, h).tokens


@pytest.mark.parametrize("budget", [70, 140, 280, 560, 1120])
def test_gemma4_budgets(budget: int) -> None:
    proc = bare(Gemma4Processor, image_processor=Gemma4ImageProcessorPil(max_soft_tokens=budget))
    n = check_all(
        "gemma4",
        lambda w, h: proc._get_num_multimodal_tokens(image_sizes=[(h, w)])["num_image_tokens"][0],
        max_soft_tokens=budget,
    )
    assert n >= 190


def test_gemma4_full_preprocessing() -> None:
    proc = Gemma4ImageProcessorPil()
    fam = get_family("gemma4")
    for w, h in [(100, 100), (640, 100), (333, 777)]:
        out = proc(images=[Image.new("RGB", (w, h))])
        assert int(out["num_soft_tokens_per_image"][0]) == fam.count_image(w, h).tokens


def test_gemma4_audio() -> None:
    proc = bare(Gemma4Processor, feature_extractor=Gemma4AudioFeatureExtractor(), audio_seq_length=750)
    fam = get_family("gemma4")
    for samples in [400, 1600, 16_000, 48_000, 160_000, 333_333, 480_000, 1_000_000]:
        expected = proc._compute_audio_num_tokens(np.zeros(samples), 16_000)
        assert fam.count_audio(samples / 16_000).tokens == expected, samples


def test_idefics3_tokens_including_markers() -> None:
    proc = bare(
        Idefics3Processor,
        image_seq_len=169,
        image_processor=Idefics3ImageProcessorPil(),
        tokenizer=lambda text, add_special_tokens=False: {"input_ids": [0]},  # "\n\n" is one token
    )
    n = check_all(
        "idefics3",
        lambda w, h: proc._get_num_multimodal_tokens(image_sizes=[(h, w)])["num_image_tokens"][0],
        total=True,
    )
    assert n >= 200


def test_idefics3_full_preprocessing_grid() -> None:
    proc = Idefics3ImageProcessorPil()
    fam = get_family("idefics3")
    for w, h in [(50, 40), (500, 300), (300, 900)]:
        out = proc(images=[Image.new("RGB", (w, h))], return_row_col_info=True)
        rows, cols = int(out["rows"][0][0]), int(out["cols"][0][0])
        assert fam.count_image(w, h).tokens == 169 * (rows * cols + 1)


def test_smolvlm_tiles() -> None:
    proc = SmolVLMImageProcessorPil(size={"longest_edge": 2048}, max_image_size={"longest_edge": 512})
    n = check_all("smolvlm", lambda w, h: 64 * max(1, proc.get_number_of_image_patches(h, w)[0]))
    assert n >= 200


def test_llava_1_5() -> None:
    proc = bare(
        LlavaProcessor,
        patch_size=14,
        num_additional_image_tokens=1,
        vision_feature_select_strategy="default",
        image_processor=LlavaImageProcessorPil(crop_size={"height": 336, "width": 336}),
    )
    n = check_all(
        "llava-1.5", lambda w, h: proc._get_num_multimodal_tokens(image_sizes=[(h, w)])["num_image_tokens"][0]
    )
    assert n >= 200


def test_llava_next() -> None:
    proc = bare(
        LlavaNextProcessor,
        patch_size=14,
        num_additional_image_tokens=1,
        vision_feature_select_strategy="default",
        image_processor=LlavaNextImageProcessorPil(
            size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
        ),
    )
    n = check_all(
        "llava-next",
        lambda w, h: proc._get_num_multimodal_tokens(image_sizes=[(h, w)])["num_image_tokens"][0],
    )
    assert n >= 200


def test_internvl() -> None:
    proc = bare(
        InternVLProcessor,
        image_seq_length=256,
        image_processor=GotOcr2ImageProcessorPil(crop_to_patches=True, size={"height": 448, "width": 448}),
    )
    n = check_all(
        "internvl",
        lambda w, h: proc._get_num_multimodal_tokens(image_sizes=[(h, w)])["num_image_tokens"][0],
        total=True,
    )
    assert n >= 200


def test_internvl_full_preprocessing_tiles() -> None:
    proc = GotOcr2ImageProcessorPil(crop_to_patches=True, size={"height": 448, "width": 448})
    fam = get_family("internvl")
    for w, h in [(100, 100), (900, 300), (200, 700)]:
        out = proc(images=[Image.new("RGB", (w, h))])
        assert fam.count_image(w, h).tokens == 256 * int(out["num_patches"][0])


def test_pixtral() -> None:
    def reference(w: int, h: int) -> int:
        image = zeros_image(h, w, channels_first=False)
        rh, rw = get_resize_output_image_size(
            image, (1024, 1024), (16, 16), input_data_format="channels_last"
        )
        return (rw // 16 + 1) * (rh // 16)  # processing_pixtral: ([IMG]*cols + [IMG_BREAK]) * rows

    assert check_all("pixtral", reference, total=True) >= 200


def test_pixtral_full_preprocessing() -> None:
    proc = PixtralImageProcessorPil()
    fam = get_family("pixtral")
    for w, h in [(20, 20), (300, 170), (1500, 90)]:
        out = proc(images=[Image.new("RGB", (w, h))])
        rh, rw = (int(v) for v in out["image_sizes"][0])
        assert fam.count_image(w, h) == ((rh // 16) * (rw // 16), rh // 16)


def test_qwen2_audio() -> None:
    extractor = WhisperFeatureExtractor()
    proc = bare(Qwen2AudioProcessor, feature_extractor=extractor, audio_token="<|AUDIO|>")
    fam = get_family("qwen2-audio")
    for samples in [1, 159, 160, 161, 16_000, 100_000, 160_000, 479_999, 480_000, 700_000]:
        inputs, _ = Qwen2AudioProcessor._process_audio(
            proc, [np.zeros(samples, dtype=np.float32)], sampling_rate=16_000
        )
        assert fam.count_audio(samples / 16_000).tokens == inputs["num_audio_tokens"][0], samples


def test_phi4_multimodal_crop_grid_choice_matches_the_processor() -> None:
    """The grid choice for images over 36 crops, against the processor's own method (the mask
    arithmetic after it needs torch and is checked by worked examples in test_tokens_rules)."""
    mod = load_without_torch("transformers.models.phi4_multimodal", "image_processing_phi4_multimodal")
    cls = mod.Phi4MultimodalImageProcessor
    proc = object.__new__(cls)
    n = 36
    targets = sorted(
        {
            (i, j)
            for k in range(1, n + 1)
            for i in range(1, k + 1)
            for j in range(1, k + 1)
            if 1 <= i * j <= n
        },
        key=lambda x: x[0] * x[1],
    )
    params = Phi4MMParams()
    for w, h in random_sizes(400, seed=3):
        assert closest_grid(w, h, params) == cls.find_closest_aspect_ratio(proc, w / h, targets, w, h, 448)


def test_llama4_canvases_match_find_supported_resolutions() -> None:
    mod = load_without_torch("transformers.models.llama4", "image_processing_llama4")
    expected = mod.find_supported_resolutions(16, SizeDict(height=336, width=336))
    assert list(supported_canvases(16, 336)) == [tuple(r) for r in expected]


def test_llama4_best_fit_matches_get_best_fit() -> None:
    """``get_best_fit`` runs on numpy float32 arrays standing in for torch tensors (torch divides
    int64 tensors into float32, so float32 keeps the processor's rounding)."""
    mod = load_without_torch("transformers.models.llama4", "image_processing_llama4")
    mod.torch.where, mod.torch.min, mod.torch.max, mod.torch.argmin = np.where, np.min, np.max, np.argmin
    canvases = np.array(mod.find_supported_resolutions(16, SizeDict(height=336, width=336)), dtype=np.float32)
    fam = get_family("llama4")
    for w, h in SIZES:
        ch, cw = (int(v) for v in mod.get_best_fit((h, w), canvases))
        grid = (ch // 336) * (cw // 336)
        assert fam.count_image(w, h).tokens == 144 * (grid + 1 if grid > 1 else 1), (w, h)


def test_qwen3_vl_video_with_the_per_frame_cap() -> None:
    mod = qwen3_video_module()
    proc = bare(
        mod.Qwen3VLVideoProcessor,
        size={"shortest_edge": 4096, "longest_edge": 25_165_824},
        cap_pixels_per_frame=True,
    )
    fam = get_family("qwen3-vl").with_params({"cap_pixels_per_frame": True})
    for frames, fps, w, h in _video_cases(13, 200):
        meta = VideoMetadata(total_num_frames=frames, fps=fps, width=w, height=h)
        sampled = len(mod.Qwen3VLVideoProcessor.sample_frames(proc, meta))
        expected = mod.Qwen3VLVideoProcessor.get_num_of_video_patches(proc, sampled, h, w) // 4
        assert fam.count_video(w, h, frames / fps, fps).tokens == expected, (frames, fps, w, h)


def test_gemma4_video_frames_at_the_video_budget() -> None:
    video_processor = types.SimpleNamespace(patch_size=16, pooling_kernel_size=3, max_soft_tokens=70)
    proc = bare(Gemma4Processor, image_processor=Gemma4ImageProcessorPil(), video_processor=video_processor)
    fam = get_family("gemma4")
    for frames, fps, w, h in _video_cases(17, 200):
        if max(w, h) / min(w, h) > 20:
            continue  # too elongated for a 70-token frame budget in both implementations
        sampled = min(32, frames)  # num_frames=32, uniformly spaced when the clip has more
        expected = proc._get_num_multimodal_tokens(video_sizes=[(sampled, h, w)])["num_video_tokens"][0]
        assert fam.count_video(w, h, frames / fps, fps).tokens == expected, (frames, fps, w, h)
