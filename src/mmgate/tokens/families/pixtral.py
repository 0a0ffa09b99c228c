"""Pixtral: native resolution (capped at a longest edge) in 16-px patches, a break after each row.

Mirrors transformers ``pixtral/image_processing_pil_pixtral.py: get_resize_output_image_size`` and
``processing_pixtral.py``: ``([IMG]×cols + [IMG_BREAK])×rows`` with the last break replaced by
``[IMG_END]``. transformers floors the downscale; mistral-common rounds (``round_half_even=True``
reproduces it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class PixtralParams:
    longest_edge: int = 1024
    patch_size: int = 16
    spatial_merge_size: int = 1
    round_half_even: bool = False  # mistral-common's rounding instead of transformers' floor


def pixtral_grid(p: PixtralParams, width: int, height: int) -> tuple[int, int]:
    ratio = max(height / p.longest_edge, width / p.longest_edge)
    if ratio > 1:
        if p.round_half_even:
            height, width = round(height / ratio), round(width / ratio)
        else:
            height, width = math.floor(height / ratio), math.floor(width / ratio)
    unit = p.patch_size * p.spatial_merge_size
    return (height - 1) // unit + 1, (width - 1) // unit + 1


def pixtral_image(p: PixtralParams, width: int, height: int) -> Count:
    rows, cols = pixtral_grid(p, width, height)
    return Count(rows * cols, rows)


PIXTRAL = Family(
    "pixtral",
    PixtralParams(),
    image=pixtral_image,
    about="Pixtral-12B: up to 1024 px, one token per 16-px patch, [IMG_BREAK] per row",
)
