"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: dynamic resolution snapped to a patch×merge grid.

Mirrors transformers ``qwen2_vl/image_processing_pil_qwen2_vl.py: smart_resize`` and
``qwen3_vl/video_processing_qwen3_vl.py`` (frame sampling, ``smart_resize`` over time, padding to the
temporal patch). Prompt: ``<|vision_start|><|image_pad|>×N<|vision_end|>``; Qwen3-VL video repeats
``<t seconds><|vision_start|><|video_pad|>×n<|vision_end|>`` per temporal group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmgate.errors import RequestError
from mmgate.tokens.rules import Count, Family

MAX_ASPECT = 200  # smart_resize refuses anything more elongated than this


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int, frames: int = 1, temporal: int = 1
) -> tuple[int, int]:
    """Snap (height, width) to multiples of ``factor`` with area in [min_pixels, max_pixels].

    For video (Qwen3-VL) the pixel budget covers all ``frames`` of the clip, rounded to whole
    temporal patches; images are the case ``frames = temporal = 1``.
    """
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise RequestError(
            f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds the Qwen-VL limit "
            f"of {MAX_ASPECT}:1 ({width}x{height})"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True, slots=True)
class QwenVLParams:
    """Processor parameters (HF names). Video ones carry a ``video_`` prefix where HF reuses a name."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    # video processor (Qwen2-VL video_processing_qwen2_vl.py / Qwen3-VL video_processing_qwen3_vl.py)
    video_min_pixels: int = 128 * 28 * 28
    video_max_pixels: int = 28 * 28 * 768
    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 768
    cap_pixels_per_frame: bool = False
    max_video_tokens: int = 768
    timestamp_tokens: int = 0  # text tokens of the "<t seconds>" prefix per temporal group (Qwen3-VL)


def qwen_image(p: QwenVLParams, width: int, height: int) -> Count:
    h, w = smart_resize(height, width, p.patch_size * p.merge_size, p.min_pixels, p.max_pixels)
    return Count((h // p.patch_size) * (w // p.patch_size) // (p.merge_size**2), 2)


def sampled_frames(p: QwenVLParams, total_frames: int, src_fps: float) -> int:
    """How many frames the video processor samples (``sample_frames`` with ``fps``)."""
    n = int(total_frames / src_fps * p.fps)
    return min(max(n, p.min_frames), p.max_frames, total_frames)


def video_smart_resize(
    num_frames: int, height: int, width: int, temporal: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen3-VL's video ``smart_resize``: frames smaller than one merged patch are scaled up first."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    return smart_resize(height, width, factor, min_pixels, max_pixels, num_frames, temporal)


def qwen3_video(p: QwenVLParams, width: int, height: int, duration_s: float, fps: float) -> Count:
    """Frames sampled at ``p.fps``, resized jointly, merged in pairs; one marker pair per group."""
    total = max(1, round(duration_s * fps))
    # A clip shorter than one temporal patch is padded by repeating its last frame.
    n = max(sampled_frames(p, total, fps), p.temporal_patch_size)
    factor = p.patch_size * p.merge_size
    max_pixels = p.video_max_pixels
    if p.cap_pixels_per_frame:
        per_frame = max(
            min(p.max_video_tokens * factor * factor, max_pixels // n), int(p.video_min_pixels * 1.05)
        )
        max_pixels = per_frame * n
    h, w = video_smart_resize(n, height, width, p.temporal_patch_size, factor, p.video_min_pixels, max_pixels)
    groups = (n + -n % p.temporal_patch_size) // p.temporal_patch_size
    per_group = (h // p.patch_size) * (w // p.patch_size) // (p.merge_size**2)
    return Count(groups * per_group, groups * (2 + p.timestamp_tokens))


def qwen2_sampled_frames(p: QwenVLParams, total_frames: int, src_fps: float) -> int:
    """Qwen2-VL's ``sample_frames`` with ``fps``: clamped, then floored to whole temporal patches."""
    t = p.temporal_patch_size
    max_frames = math.floor(min(p.max_frames, total_frames) / t) * t
    n = min(max(total_frames / src_fps * p.fps, p.min_frames), max_frames, total_frames)
    n = math.floor(n / t) * t
    # Indices are arange(0, total, total / n): float rounding can yield one extra frame.
    return math.ceil(total_frames / (total_frames / n)) if n > 0 else 0


def qwen2_video(p: QwenVLParams, width: int, height: int, duration_s: float, fps: float) -> Count:
    """Qwen2-VL/2.5-VL video: frames sampled at ``p.fps``, the image ``smart_resize`` per frame."""
    total = max(1, round(duration_s * fps))
    n = max(qwen2_sampled_frames(p, total, fps), p.temporal_patch_size)
    h, w = smart_resize(height, width, p.patch_size * p.merge_size, p.video_min_pixels, p.video_max_pixels)
    groups = (n + -n % p.temporal_patch_size) // p.temporal_patch_size
    return Count(groups * (h // p.patch_size) * (w // p.patch_size) // (p.merge_size**2), 2)


# Reference models' preprocessor_config.json (Qwen/Qwen2-VL-7B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct):
# min_pixels=3136, max_pixels=12845056 (vllm.md §7 quotes these from third-party copies of the hub files).
QWEN2_VL = Family(
    "qwen2-vl",
    QwenVLParams(min_pixels=3136, max_pixels=12_845_056),
    image=qwen_image,
    video=qwen2_video,
    about="Qwen2-VL-7B-Instruct: 14-px patches merged 2x2, 3136..12845056 px",
)
QWEN2_5_VL = Family(
    "qwen2.5-vl",
    QwenVLParams(min_pixels=3136, max_pixels=12_845_056),
    image=qwen_image,
    video=qwen2_video,
    about="Qwen2.5-VL-7B-Instruct: 14-px patches merged 2x2, 3136..12845056 px",
)
# Qwen3-VL preprocessor_config.json: size {shortest_edge: 65536, longest_edge: 16777216}, patch 16;
# video_preprocessor_config.json: size {shortest_edge: 4096, longest_edge: 25165824} (the budget of the
# whole clip), fps 2, 4..768 frames (as shipped on the hub; transformers' class defaults are smaller).
QWEN3_VL = Family(
    "qwen3-vl",
    QwenVLParams(
        min_pixels=65_536,
        max_pixels=16_777_216,
        patch_size=16,
        video_min_pixels=4096,
        video_max_pixels=25_165_824,
        # "<1.5 seconds>" in the Qwen tokenizer: "<" "1" "." "5" " seconds" ">" (digits split) ≈ 6
        timestamp_tokens=6,
    ),
    image=qwen_image,
    video=qwen3_video,
    about="Qwen3-VL: 16-px patches merged 2x2, 65536..16777216 px; video at 2 fps, pairs of frames",
)
