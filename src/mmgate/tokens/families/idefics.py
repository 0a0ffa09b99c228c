"""Idefics3 and SmolVLM: rescale to a longest edge, split into square tiles plus a global image.

Mirrors transformers ``idefics3/image_processing_pil_idefics3.py: get_number_of_image_patches`` and
``processing_idefics3.py: _get_num_multimodal_tokens`` (SmolVLM shares the image processor).
Each tile is ``<fake_token_around_image><row_i_col_j>`` + image_seq_len tokens, rows end in ``\\n``,
then ``<fake_token_around_image><global-img>`` + image_seq_len + ``<fake_token_around_image>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmgate.tokens.rules import Count, Family

MAX_IMAGE_SIZE = 4096  # the processors' absolute cap on the longest side


@dataclass(frozen=True, slots=True)
class IdeficsParams:
    longest_edge: int = 4 * 364  # size["longest_edge"]: the image is rescaled (up or down) to this
    max_image_size: int = 364  # max_image_size["longest_edge"]: the tile side
    image_seq_len: int = 169  # tokens per tile: (image_size / patch)² / scale_factor²
    do_image_splitting: bool = True
    split_newline_tokens: int = 0  # extra token when "\n\n" is not one token in the tokenizer


def rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    aspect = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect)
        if height % 2:
            height += 1
    else:
        height = max_len
        width = int(height * aspect)
        if width % 2:
            width += 1
    return max(height, 1), max(width, 1)


def scale_below(height: int, width: int, max_len: int) -> tuple[int, int]:
    aspect = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect)
    return max(height, 1), max(width, 1)


def tile_grid(p: IdeficsParams, width: int, height: int) -> tuple[int, int]:
    """(rows, cols) of tiles; (0, 0) when the image is a single tile."""
    if not p.do_image_splitting:
        return 0, 0
    h, w = rescale_to_max_len(height, width, p.longest_edge)
    h, w = scale_below(h, w, MAX_IMAGE_SIZE)
    tile = p.max_image_size
    rh, rw = math.ceil(h / tile) * tile, math.ceil(w / tile) * tile
    if rh > tile or rw > tile:
        return math.ceil(rh / tile), math.ceil(rw / tile)
    return 0, 0


def idefics_image(p: IdeficsParams, width: int, height: int) -> Count:
    rows, cols = tile_grid(p, width, height)
    tiles = rows * cols + 1
    extra = 3 + (p.split_newline_tokens + rows * (2 * cols + 1) if rows else 0)
    return Count(tiles * p.image_seq_len, extra)


IDEFICS3 = Family(
    "idefics3",
    IdeficsParams(),
    image=idefics_image,
    about="Idefics3-8B-Llama3: 1456-px longest edge, 364-px tiles of 169 tokens + global image",
)
# HuggingFaceTB/SmolVLM-256M-Instruct preprocessor/processor config: size.longest_edge 2048,
# max_image_size 512, image_seq_len 64 (not read from the hub itself; vllm.md §7 and several
# public copies of those config files agree).
SMOLVLM = Family(
    "smolvlm",
    IdeficsParams(longest_edge=2048, max_image_size=512, image_seq_len=64),
    image=idefics_image,
    about="SmolVLM-256M/500M: 2048-px longest edge, 512-px tiles of 64 tokens + global image",
)
