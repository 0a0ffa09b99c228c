"""The request bodies of the overhead benchmark.

They span what a router's cost depends on: a small text chat (per-request fixed cost), one and
three 1280x720 JPEGs inline as base64 data URLs (moving and hashing megabytes), one image by URL
(a tiny body that a multimodal router still has to price), and a streamed answer of 100 tokens
(per-chunk relay cost). The JPEGs are smoothed random noise, seeded, so every run sends the same
bytes and three images weigh about 2.3 MB together.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

MODEL = "null-model"
WIDTH, HEIGHT = 1280, 720
QUESTION = "Describe what you see in detail, then list three objects and their colours."
SYSTEM = (
    "You are a careful visual assistant. Answer in plain English, be concise, and say when you "
    "are unsure. Never invent details that are not visible. " * 4
).strip()


@dataclass(frozen=True, slots=True)
class BodySpec:
    name: str
    description: str
    images: int = 0
    by_url: bool = False
    stream_tokens: int = 0


BODIES: dict[str, BodySpec] = {
    spec.name: spec
    for spec in (
        BodySpec("text", "text-only chat (system + user message)"),
        BodySpec("image-1", "one 1280x720 JPEG inline (base64 data URL)", images=1),
        BodySpec("image-3", "three 1280x720 JPEGs inline (base64 data URLs)", images=3),
        BodySpec("image-url", "one image by URL (not fetched)", images=1, by_url=True),
        BodySpec("stream-100", "text chat, streamed answer of 100 tokens", stream_tokens=100),
    )
}


def jpeg(seed: int) -> bytes:
    """A 1280x720 JPEG of smoothed noise (~590 KB): incompressible enough to be realistic."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (HEIGHT // 2, WIDTH // 2, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).resize((WIDTH, HEIGHT), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def body(spec: BodySpec) -> bytes:
    """The JSON bytes of one benchmark request."""
    parts: list[dict[str, object]] = [{"type": "text", "text": QUESTION}]
    for index in range(spec.images):
        if spec.by_url:
            url = f"https://images.example.com/photo-{index}-{WIDTH}x{HEIGHT}.jpg"
        else:
            url = "data:image/jpeg;base64," + base64.b64encode(jpeg(seed=index + 1)).decode()
        parts.append({"type": "image_url", "image_url": {"url": url}})
    request: dict[str, object] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": parts if spec.images else QUESTION},
        ],
        "max_tokens": spec.stream_tokens or 16,
        "temperature": 0,
    }
    if spec.stream_tokens:
        request["stream"] = True
    return json.dumps(request).encode()


def write_bodies(folder: Path, names: Sequence[str]) -> dict[str, Path]:
    """Write each named body to ``folder/<name>.json`` and return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name in names:
        paths[name] = folder / f"{name}.json"
        paths[name].write_bytes(body(BODIES[name]))
    return paths
