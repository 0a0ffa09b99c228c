"""Images and chats for the reference engine's tests: distinct pictures by seed, a one-pixel edit,
and user turns that carry them as inline data: URIs."""

from __future__ import annotations

import io
import random
from typing import Any

from PIL import Image

from support.bodies import data_uri, image_part


def picture(seed: int, width: int = 64, height: int = 48) -> bytes:
    """A PNG of random pixels, the same for a seed (different seeds give different features)."""
    rng = random.Random(seed)
    img = Image.frombytes(
        "RGB", (width, height), bytes(rng.randrange(256) for _ in range(width * height * 3))
    )
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def one_pixel_off(png: bytes) -> bytes:
    """The same PNG with its top-left pixel changed."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    r, g, b = img.getpixel((0, 0))  # type: ignore[misc]
    img.putpixel((0, 0), ((r + 128) % 256, g, b))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def user_turn(text: str, *pngs: bytes, **part_fields: Any) -> dict[str, Any]:
    """A user message: the images first (inline PNG data URIs), then the text."""
    parts = [{**image_part(data_uri(png)), **part_fields} for png in pngs]
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}
