"""Phi-3.5-vision (HD transform in 336-px crops) and Phi-4-multimodal (448-px dynamic HD + audio).

Phi-3.5-vision follows the hub's remote ``processing_phi3_v.py`` (``calc_hd_transform_size``,
as vLLM ``phi3v.py`` delegates to it); Phi-4-multimodal follows transformers
``phi4_multimodal/image_processing_phi4_multimodal.py`` (``dynamic_preprocess`` and the
downsampled attention-mask count) and vLLM ``phi4mm.py`` for audio. Both processors need torch or
remote code, so the tests check hand-worked examples. Every position is an image/audio placeholder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class Phi3VParams:
    num_crops: int = 4  # microsoft/Phi-3.5-vision-instruct recommends 4 for multi-frame, 16 single-image
    crop_size: int = 336
    tokens_per_crop: int = 144
    tokens_per_row: int = 12


def phi3v_hd_size(p: Phi3VParams, width: int, height: int) -> tuple[int, int]:
    """(width, height) after the HD transform: ≤num_crops crops wide, padded to whole crops tall."""
    transposed = width < height
    if transposed:
        width, height = height, width
    ratio = width / height
    scale = 1
    while scale * math.ceil(scale / ratio) <= p.num_crops:
        scale += 1
    scale -= 1
    new_w = int(scale * p.crop_size)
    new_h = int(new_w / ratio)
    new_h = math.ceil(new_h / p.crop_size) * p.crop_size
    return (new_h, new_w) if transposed else (new_w, new_h)


def phi3v_image(p: Phi3VParams, width: int, height: int) -> Count:
    w, h = phi3v_hd_size(p, width, height)
    rows, cols = h // p.crop_size, w // p.crop_size
    return Count((rows * cols + 1) * p.tokens_per_crop + 1 + (rows + 1) * p.tokens_per_row)


@dataclass(frozen=True, slots=True)
class Phi4MMParams:
    image_size: int = 448  # crop side
    patch_size: int = 14
    dynamic_hd: int = 36  # most crops
    # audio (vLLM phi4mm.py): 16 kHz, 25 ms window, 10 ms hop, then compression
    audio_compression_rate: int = 8
    audio_sampling_rate: int = 16_000


def _closest_grid(width: int, height: int, p: Phi4MMParams) -> tuple[int, int]:
    aspect = width / height
    area = width * height
    grids = sorted(
        {
            (i, j)
            for n in range(1, p.dynamic_hd + 1)
            for i in range(1, n + 1)
            for j in range(1, n + 1)
            if i * j <= p.dynamic_hd
        },
        key=lambda g: g[0] * g[1],
    )
    best, best_diff = (1, 1), float("inf")
    for i, j in grids:
        diff = abs(aspect - i / j)
        if diff < best_diff:
            best, best_diff = (i, j), diff
        elif diff == best_diff and area > 0.5 * p.image_size * p.image_size * i * j:
            best = (i, j)
    return best


def phi4mm_image(p: Phi4MMParams, width: int, height: int) -> Count:
    s = p.image_size
    cols, rows = math.ceil(width / s), math.ceil(height / s)
    if cols * rows > p.dynamic_hd:
        cols, rows = _closest_grid(width, height, p)
    tw, th = s * cols, s * rows
    if tw / width < th / height:
        pad_w, pad_h = 0, th - int(height * tw / width)
    else:
        pad_w, pad_h = tw - int(width * th / height), 0
    mask = s // p.patch_size
    valid_cols = mask * cols - (pad_w // p.patch_size if pad_w >= p.patch_size else 0)
    valid_rows = mask * rows - (pad_h // p.patch_size if pad_h >= p.patch_size else 0)
    fw, fh = -(-valid_cols // 2), -(-valid_rows // 2)
    return Count(256 + 1 + fw * fh + fh + 16)


def phi4mm_audio(p: Phi4MMParams, duration_s: float) -> Count:
    samples = int(duration_s * p.audio_sampling_rate)
    frames = max(0, (samples - 400) // 160 + 1)
    return Count(-(-frames // p.audio_compression_rate))


PHI3_5_VISION = Family(
    "phi-3.5-vision",
    Phi3VParams(),
    image=phi3v_image,
    about="Phi-3.5-vision: HD transform into ≤num_crops 336-px crops (default 4), 144 tokens per crop",
)
PHI4_MM = Family(
    "phi-4-multimodal",
    Phi4MMParams(),
    image=phi4mm_image,
    audio=phi4mm_audio,
    about="Phi-4-multimodal: 448-px dynamic HD (≤36 crops) + global; audio 80 ms per token",
)
