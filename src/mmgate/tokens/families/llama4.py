"""Llama 4: 336-px tiles on the best-fitting canvas of ≤16 tiles, plus a global tile.

Mirrors transformers ``llama4/image_processing_llama4.py`` (``find_supported_resolutions``,
``get_best_fit``) and ``processing_llama4.py: _prompt_split_image``. The processor module needs
torch; the tests run its canvas and best-fit functions with numpy standing in for the tensors.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from mmgate.tokens.rules import Count, Family


@dataclass(frozen=True, slots=True)
class Llama4Params:
    tile_size: int = 336  # size.height == size.width
    max_patches: int = 16  # tiles per image (not counting the global tile)
    patch_size: int = 14
    pixel_shuffle_ratio: float = 0.5
    resize_to_max_canvas: bool = False


@lru_cache(maxsize=16)
def supported_canvases(max_tiles: int, tile: int) -> tuple[tuple[int, int], ...]:
    """(height, width) canvases for every factorisation of 1..max_tiles, grouped by aspect."""
    by_aspect: dict[float, list[tuple[int, int]]] = defaultdict(list)
    for n in range(max_tiles, 0, -1):
        for f in sorted({d for d in range(1, n + 1) if n % d == 0}):
            by_aspect[f / (n // f)].append((f, n // f))
    return tuple((h * tile, w * tile) for group in by_aspect.values() for h, w in group)


@lru_cache(maxsize=16)
def _canvases_by_area(max_tiles: int, tile: int) -> tuple[tuple[int, int], ...]:
    # A stable sort: among equal areas the processor's order is kept, so "first of the smallest
    # area" below is the canvas ``argmin(area)`` picks in transformers.
    return tuple(sorted(supported_canvases(max_tiles, tile), key=lambda c: c[0] * c[1]))


def best_canvas(p: Llama4Params, width: int, height: int) -> tuple[int, int]:
    """``get_best_fit``: the least upscale (or the most upscale with ``resize_to_max_canvas``), else
    the least downscale; ties go to the smallest canvas. One pass over the canvases by area."""
    up_scale, up = (0.0 if p.resize_to_max_canvas else float("inf")), None
    down_scale, down = -1.0, None
    for ch, cw in _canvases_by_area(p.max_patches, p.tile_size):
        sw, sh = cw / width, ch / height
        s = sw if sw < sh else sh
        if s >= 1:
            if (s > up_scale) if p.resize_to_max_canvas else (s < up_scale):
                up_scale, up = s, (ch, cw)
        elif s > down_scale:
            down_scale, down = s, (ch, cw)
    best = up or down
    assert best is not None
    return best


def llama4_image(p: Llama4Params, width: int, height: int) -> Count:
    ch, cw = best_canvas(p, width, height)
    grid = (ch // p.tile_size) * (cw // p.tile_size)
    per_tile = (p.tile_size // p.patch_size) ** 2 // round(1.0 / p.pixel_shuffle_ratio**2)
    tiles = grid + 1 if grid > 1 else 1
    # <|image_start|> <|image|> <|image_end|>, plus one x/y separator per tile of a split image
    return Count(tiles * per_tile, 3 + (grid if grid > 1 else 0))


LLAMA4 = Family(
    "llama4",
    Llama4Params(),
    image=llama4_image,
    about="Llama 4 Scout/Maverick: 336-px tiles (≤16) + global tile, 144 tokens each",
)
