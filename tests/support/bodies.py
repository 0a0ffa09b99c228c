"""Real images made with Pillow and request bodies that carry them."""

from __future__ import annotations

import base64
import io
from typing import Any

import orjson
from PIL import Image


def image(fmt: str, width: int, height: int, mode: str = "RGB", **save: Any) -> bytes:
    """An encoded image with a gradient (so encoders produce realistic, non-trivial output)."""
    img = Image.linear_gradient("L").resize((width, height)).convert(mode)
    out = io.BytesIO()
    img.save(out, fmt, **save)
    return out.getvalue()


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
