"""InternVL: 448-px tiles on the grid whose aspect is closest to the image's, plus a thumbnail.

Mirrors transformers ``got_ocr2/image_processing_pil_got_ocr2.py: get_optimal_tiled_canvas``
(the image processor of the ``-hf`` InternVL checkpoints) and ``internvl/processing_internvl.py``.
Prompt: ``<img>`` + ``<IMG_CONTEXT>`` × 256 per tile + ``</img>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class InternVLParams:
    image_size: int = 448  # tile side (size.height / size.width)
    min_patches: int = 1  # min_dynamic_patch
    max_patches: int = 12  # max_dynamic_patch
    crop_to_patches: bool = True
    image_seq_length: int = 256  # (448/14)² * 0.5²


@lru_cache(maxsize=64)
def tile_arrangements(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """(columns, rows) grids with min ≤ tiles ≤ max, by tile count (stable within a count)."""
    grids = [
        (w, h)
        for w in range(1, max_tiles + 1)
        for h in range(1, max_tiles + 1)
        if min_tiles <= w * h <= max_tiles
    ]
    return tuple(sorted(grids, key=lambda g: g[0] * g[1]))


def best_grid(width: int, height: int, p: InternVLParams) -> tuple[int, int]:
    aspect = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for cols, rows in tile_arrangements(p.min_patches, p.max_patches):
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best_diff, best = diff, (cols, rows)
        elif diff == best_diff and area > 0.5 * p.image_size * p.image_size * cols * rows:
            best = (cols, rows)
    return best


def internvl_image(p: InternVLParams, width: int, height: int) -> Count:
    tiles = 1
    if p.crop_to_patches and p.max_patches > 1:
        cols, rows = best_grid(width, height, p)
        if cols * rows > 1:
            tiles += cols * rows
    return Count(tiles * p.image_seq_length, 2)


INTERNVL = Family(
    "internvl",
    InternVLParams(),
    image=internvl_image,
    about="InternVL3 (-hf): 448-px tiles (1..12) + thumbnail, 256 tokens each",
)
