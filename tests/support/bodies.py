"""Real images made with Pillow and request bodies that carry them."""

from __future__ import annotations

import base64
import io
import random
from typing import Any

import orjson
from PIL import Image


def image(fmt: str, width: int, height: int, mode: str = "RGB", **save: Any) -> bytes:
    """An encoded image with a gradient (so encoders produce realistic, non-trivial output)."""
    img = Image.linear_gradient("L").resize((width, height)).convert(mode)
    out = io.BytesIO()
    img.save(out, fmt, **save)
    return out.getvalue()


def photo(seed: int, width: int = 1280, height: int = 720) -> bytes:
    """A JPEG of smoothed noise, seeded: about 0.6 MB at 1280x720, as incompressible as a photo, so
    a body of a few moves megabytes through a parser, a hash and a splice."""
    half = (width // 2, height // 2)
    noise = Image.frombytes("RGB", half, random.Random(seed).randbytes(half[0] * half[1] * 3))
    img = noise.resize((width, height), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def photo_chat(images: int = 0, *, by_url: bool = False, model: str = "null-model") -> bytes:
    """A system prompt and a question with ``images`` 1280x720 photos, inline as base64 data URLs
    (distinct seeds) or by URL; with none, the question is plain text content."""
    question = "Describe what you see in detail, then list three objects and their colours."
    urls = [
        f"https://images.example.com/photo-{i}.jpg" if by_url else data_uri(photo(seed=i + 1), "image/jpeg")
        for i in range(images)
    ]
    content: str | list[dict[str, Any]] = (
        [{"type": "text", "text": question}, *(image_part(url) for url in urls)] if images else question
    )
    system = "You are a careful visual assistant. Answer in plain English and be concise. " * 4
    messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
    return orjson.dumps({"model": model, "messages": messages, "max_tokens": 16, "temperature": 0})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{b64(data)}"


def image_part(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def chat(*content: Any, model: str = "qwen", **fields: Any) -> bytes:
    """A one-turn chat body; each positional item is a content part (str → text part)."""
    parts = [{"type": "text", "text": c} if isinstance(c, str) else c for c in content]
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": parts}], **fields})


def form(*fields: tuple[str, str | tuple[str, bytes, str]], boundary: str = "mmgate-test-7MA4YWxk") -> bytes:
    """A multipart/form-data body (RFC 7578): ``(name, text)`` or ``(name, (filename, bytes, type))``."""
    out = bytearray()
    for name, value in fields:
        out += f"--{boundary}\r\n".encode()
        if isinstance(value, str):
            out += f'Content-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        else:
            filename, data, kind = value
            out += f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'.encode()
            out += f"Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out)


def form_headers(boundary: str = "mmgate-test-7MA4YWxk") -> dict[str, str]:
    return {"content-type": f"multipart/form-data; boundary={boundary}"}
