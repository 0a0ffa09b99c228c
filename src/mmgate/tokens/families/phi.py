"""Phi-3.5-vision (HD transform in 336-px crops) and Phi-4-multimodal (448-px dynamic HD + audio).

Phi-3.5-vision follows the hub's remote ``processing_phi3_v.py`` (``calc_hd_transform_size``,
as vLLM ``phi3v.py`` delegates to it); Phi-4-multimodal follows transformers
``phi4_multimodal/image_processing_phi4_multimodal.py`` (``dynamic_preprocess`` and the
downsampled attention-mask count) and vLLM ``phi4mm.py`` for audio. Both processors need torch or
remote code, so the tests check hand-worked examples. Every position is an image/audio placeholder.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache

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


@lru_cache(maxsize=16)
def _grids(max_num: int, min_num: int = 1) -> tuple[tuple[int, int], ...]:
    # Built exactly as the processor builds it (a set, then sorted by i*j) so that grids with the
    # same tile count come in the same order and ties resolve the same way.
    found = {
        (i, j)
        for n in range(min_num, max_num + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if i * j <= max_num and i * j >= min_num
    }
    return tuple(sorted(found, key=lambda x: x[0] * x[1]))


@lru_cache(maxsize=16)
def _grids_by_ratio(max_num: int) -> tuple[list[float], dict[float, list[tuple[int, int, int]]]]:
    """Sorted distinct ratios i/j, and per ratio its grids as (position in processor order, i, j)."""
    by_ratio: dict[float, list[tuple[int, int, int]]] = {}
    for pos, (i, j) in enumerate(_grids(max_num)):
        by_ratio.setdefault(i / j, []).append((pos, i, j))
    return sorted(by_ratio), by_ratio


def closest_grid(width: int, height: int, p: Phi4MMParams) -> tuple[int, int]:
    """The processor's ``find_closest_aspect_ratio`` without scanning every grid.

    Only grids at the smallest distance can end up chosen (the first of them, then any later one at
    the same distance that passes the area test), so look at the one or two nearest ratios only.
    """
    aspect = width / height
    area = width * height
    ratios, by_ratio = _grids_by_ratio(p.dynamic_hd)
    k = bisect.bisect_left(ratios, aspect)
    near = [r for r in ratios[max(0, k - 1) : k + 1]]
    best_diff = min(abs(aspect - r) for r in near)
    tied = sorted(g for r in near if abs(aspect - r) == best_diff for g in by_ratio[r])
    _, bi, bj = tied[0]
    for _, i, j in tied[1:]:
        if area > 0.5 * p.image_size * p.image_size * i * j:
            bi, bj = i, j
    return bi, bj


def phi4mm_image(p: Phi4MMParams, width: int, height: int) -> Count:
    s = p.image_size
    cols, rows = math.ceil(width / s), math.ceil(height / s)
    if cols * rows > p.dynamic_hd:
        cols, rows = closest_grid(width, height, p)
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
