"""Regenerate the binary and derived files of examples/quickstart/ (they are committed; run this
only to change them): two WAV tones made with the standard library's ``wave`` module, the demo's
PNG and the Responses API body that carries it.

    python examples/quickstart/make_files.py

The WAVs are 8-bit mono at a low sample rate so they stay a few KB: the gateway reads a clip's
duration from its header (data bytes / byte rate) and prices by that alone, and the simulated
pods do not decode audio.
"""

from __future__ import annotations

import base64
import io
import json
import math
import wave
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = "Qwen/Qwen3-VL-32B-Instruct"  # what `mmgate demo` serves by default


def tone(seconds: float, rate: int) -> bytes:
    """A 220 Hz sine, ``seconds`` long, unsigned 8-bit mono at ``rate`` samples a second."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        samples = (128 + int(60 * math.sin(2 * math.pi * 220 * i / rate)) for i in range(int(seconds * rate)))
        w.writeframes(bytes(samples))
    return out.getvalue()


def responses_body(png: bytes) -> dict[str, object]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    content = [
        {"type": "input_text", "text": "What is in this image?"},
        {"type": "input_image", "image_url": url},
    ]
    return {"model": MODEL, "max_output_tokens": 16, "input": [{"role": "user", "content": content}]}


def main() -> None:
    from mmgate.demo import demo_image

    (HERE / "hello.wav").write_bytes(tone(3.0, 2000))
    (HERE / "speech.wav").write_bytes(tone(20.0, 1000))
    png = demo_image()
    (HERE / "sunset.png").write_bytes(png)
    (HERE / "responses.json").write_text(json.dumps(responses_body(png)) + "\n")


if __name__ == "__main__":
    main()
