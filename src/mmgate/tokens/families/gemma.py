"""Gemma 3 (fixed 256 tokens, optional pan-and-scan crops) and Gemma 4 (soft-token budgets, audio).

Mirrors transformers ``gemma3/image_processing_pil_gemma3.py: pan_and_scan`` with
``processing_gemma3.py``, and ``gemma4/image_processing_pil_gemma4.py:
get_aspect_ratio_preserving_size`` with ``processing_gemma4.py: _compute_audio_num_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmgate.errors import RequestError
from mmgate.tokens.rules import Count, Family

# "\n\n<start_of_image>" + soft tokens + "<end_of_image>\n\n": four ordinary tokens per image.
GEMMA3_MARKERS = 4
# "Here is the original image " ... " and here are some crops to help you see better " (≈15 tokens)
GEMMA3_PAS_TEXT = 15


@dataclass(frozen=True, slots=True)
class Gemma3Params:
    image_seq_length: int = 256
    do_pan_and_scan: bool = False
    pan_and_scan_min_crop_size: int = 256
    pan_and_scan_max_num_crops: int = 4
    pan_and_scan_min_ratio_to_activate: float = 1.2


def pan_and_scan_crops(p: Gemma3Params, width: int, height: int) -> int:
    """Number of extra crops pan-and-scan adds (0 when it does not activate)."""
    if width >= height:
        if width / height < p.pan_and_scan_min_ratio_to_activate:
            return 0
        n_w = math.floor(width / height + 0.5)
        n_w = min(math.floor(width / p.pan_and_scan_min_crop_size), n_w)
        n_w, n_h = min(p.pan_and_scan_max_num_crops, max(2, n_w)), 1
    else:
        if height / width < p.pan_and_scan_min_ratio_to_activate:
            return 0
        n_h = math.floor(height / width + 0.5)
        n_h = min(math.floor(height / p.pan_and_scan_min_crop_size), n_h)
        n_w, n_h = 1, min(p.pan_and_scan_max_num_crops, max(2, n_h))
    if min(math.ceil(width / n_w), math.ceil(height / n_h)) < p.pan_and_scan_min_crop_size:
        return 0
    return n_w * n_h


def gemma3_image(p: Gemma3Params, width: int, height: int) -> Count:
    crops = pan_and_scan_crops(p, width, height) if p.do_pan_and_scan else 0
    extra = GEMMA3_MARKERS * (crops + 1) + (GEMMA3_PAS_TEXT + crops - 1 if crops else 0)
    return Count(p.image_seq_length * (crops + 1), extra)


GEMMA4_BUDGETS = (70, 140, 280, 560, 1120)


@dataclass(frozen=True, slots=True)
class Gemma4Params:
    max_soft_tokens: int = 280
    patch_size: int = 16
    pooling_kernel_size: int = 3
    # video: every sampled frame at its own (smaller) budget, "mm:ss " before each
    video_max_soft_tokens: int = 70
    num_frames: int = 32
    timestamp_tokens: int = 4
    # audio (feature_extraction_gemma4.py / processing_gemma4.py)
    sampling_rate: int = 16_000
    frame_length_ms: float = 20.0
    hop_length_ms: float = 10.0
    audio_seq_length: int = 750


def gemma4_soft_tokens(width: int, height: int, budget: int, patch: int, kernel: int) -> int:
    """Soft tokens after the aspect-preserving resize into ``budget * kernel²`` patches."""
    if budget not in GEMMA4_BUDGETS:
        raise RequestError(f"Gemma 4 max_soft_tokens must be one of {GEMMA4_BUDGETS}, got {budget}")
    max_patches = budget * kernel**2
    factor = math.sqrt(max_patches * patch**2 / (height * width))
    side = kernel * patch
    th = math.floor(factor * height / side) * side
    tw = math.floor(factor * width / side) * side
    if th == 0 and tw == 0:
        raise RequestError(f"image {width}x{height} is too small for Gemma 4")
    longest = (max_patches // kernel**2) * side
    if th == 0:
        th, tw = side, min(math.floor(width / height) * side, longest)
    elif tw == 0:
        tw, th = side, min(math.floor(height / width) * side, longest)
    if th * tw > max_patches * patch**2:
        raise RequestError(f"image {width}x{height} is too elongated for Gemma 4's patch budget")
    return (th // patch) * (tw // patch) // kernel**2


def gemma4_image(p: Gemma4Params, width: int, height: int) -> Count:
    tokens = gemma4_soft_tokens(width, height, p.max_soft_tokens, p.patch_size, p.pooling_kernel_size)
    return Count(tokens, 2)  # <boi> ... <eoi>


def gemma4_video(p: Gemma4Params, width: int, height: int, duration_s: float, fps: float) -> Count:
    frames = min(p.num_frames, max(1, round(duration_s * fps)))
    per_frame = gemma4_soft_tokens(
        width, height, p.video_max_soft_tokens, p.patch_size, p.pooling_kernel_size
    )
    return Count(frames * per_frame, frames * (2 + p.timestamp_tokens))


def gemma4_audio_tokens(p: Gemma4Params, samples: int) -> int:
    """Mel frames (semicausal padding), two stride-2 convolutions, capped at ``audio_seq_length``."""
    frame_length = round(p.sampling_rate * p.frame_length_ms / 1000.0)
    hop = round(p.sampling_rate * p.hop_length_ms / 1000.0)
    frames = (samples + frame_length // 2 - (frame_length + 1)) // hop + 1
    if frames <= 0:
        return 0
    for _ in range(2):
        frames = (frames + 2 - 3) // 2 + 1
    return min(frames, p.audio_seq_length)


def gemma4_audio(p: Gemma4Params, duration_s: float) -> Count:
    return Count(gemma4_audio_tokens(p, int(duration_s * p.sampling_rate)), 2)  # <boa> ... <eoa>


GEMMA3 = Family(
    "gemma3",
    Gemma3Params(),
    image=gemma3_image,
    about="Gemma 3: 896-px SigLIP, 256 tokens per image (+256 per pan-and-scan crop when enabled)",
)
GEMMA4 = Family(
    "gemma4",
    Gemma4Params(),
    image=gemma4_image,
    video=gemma4_video,
    audio=gemma4_audio,
    about="Gemma 4: soft-token budget 70..1120 (default 280); video 32 frames at 70; audio ~40 ms/token",
)
