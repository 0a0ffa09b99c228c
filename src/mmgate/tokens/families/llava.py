"""LLaVA-1.5 (one 336-px CLIP view) and LLaVA-NeXT (any-resolution grid + newline per row).

Mirrors transformers ``llava/processing_llava.py`` and ``llava_next/processing_llava_next.py``
(``_get_number_of_features``) with ``image_processing_utils.select_best_resolution``.
All positions are ``<image>`` placeholders, so there are no separate extra tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class LlavaParams:
    image_size: int = 336  # crop_size / size.shortest_edge of the CLIP view
    patch_size: int = 14
    num_additional_image_tokens: int = 1  # CLS
    vision_feature_select_strategy: str = "default"  # "default" drops CLS, "full" keeps it
    image_grid_pinpoints: tuple[tuple[int, int], ...] = (
        (336, 672),
        (672, 336),
        (672, 672),
        (1008, 336),
        (336, 1008),
    )  # (height, width) canvases, llava-hf/llava-v1.6-mistral-7b-hf


def base_features(p: LlavaParams) -> int:
    n = (p.image_size // p.patch_size) ** 2 + p.num_additional_image_tokens
    return n - 1 if p.vision_feature_select_strategy == "default" else n


def llava_image(p: LlavaParams, width: int, height: int) -> Count:
    return Count(base_features(p))


def select_best_resolution(
    height: int, width: int, pinpoints: tuple[tuple[int, int], ...]
) -> tuple[int, int]:
    """Canvas keeping the most of the image's pixels, then wasting the least."""
    best = pinpoints[0]
    best_effective, best_waste = 0, float("inf")
    for ch, cw in pinpoints:
        scale = min(cw / width, ch / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        waste = ch * cw - effective
        if effective > best_effective or (effective == best_effective and waste < best_waste):
            best, best_effective, best_waste = (ch, cw), effective, waste
    return best


def llava_next_image(p: LlavaParams, width: int, height: int) -> Count:
    ch, cw = select_best_resolution(height, width, p.image_grid_pinpoints)
    side = p.image_size // p.patch_size
    cur_h, cur_w = side * (ch // p.image_size), side * (cw // p.image_size)
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    return Count(cur_h * cur_w + cur_h + base_features(p))


LLAVA_1_5 = Family(
    "llava-1.5",
    LlavaParams(),
    image=llava_image,
    about="LLaVA-1.5: CLIP ViT-L/14-336, 576 tokens per image",
)
LLAVA_NEXT = Family(
    "llava-next",
    LlavaParams(),
    image=llava_next_image,
    about="LLaVA-NeXT (v1.6): best-fit 336-px grid, unpadded features + newline per row + 576 base",
)
