"""price() and build_sequence() on views from the real parser (parse_request), end to end."""

from __future__ import annotations

import base64
import io
import json
import wave

from PIL import Image

from mmgate.request import parse_request
from mmgate.request.view import Modality
from mmgate.tokens import PricingConfig, build_sequence, get_family, price


def data_uri(w: int, h: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def wav_b64(seconds: float) -> str:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(bytes(int(2 * 16_000 * seconds)))
    return base64.b64encode(buf.getvalue()).decode()


def chat(*content: dict[str, object]) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": list(content)}]}).encode()


def test_probed_inline_image_url_default_and_repeat() -> None:
    img = data_uri(1280, 720)
    body = chat(
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": img}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "image_url", "image_url": {"url": img}},
    )
    view = parse_request(body, {})
    p = price(view, PricingConfig(family="qwen3-vl"))
    first, url, again = p.assets
    assert (first.tokens, first.defaulted) == (880, False)
    assert url.defaulted and (url.width, url.height) == (640, 360)
    assert url.tokens == get_family("qwen3-vl").count_image(640, 360).tokens
    assert again == first  # the same picture twice costs twice
    seq = build_sequence(view, p)
    assert len(seq.token_ids) == p.total_tokens
    assert [m.identity for m in seq.mm_items] == [a.identity for a in view.assets]
    assert seq.mm_items[0].identity == seq.mm_items[2].identity


def test_input_audio_duration_priced_by_family() -> None:
    body = chat(
        {"type": "text", "text": "transcribe"},
        {"type": "input_audio", "input_audio": {"data": wav_b64(12.0), "format": "wav"}},
    )
    view = parse_request(body, {})
    (a,) = price(view, PricingConfig(family="qwen2-audio")).assets
    assert a.modality is Modality.AUDIO and not a.defaulted and a.tokens == 300
    (w,) = price(view, PricingConfig(family="qwen3-vl", audio_family="whisper")).assets
    assert (w.tokens, w.rule) == (1500, "whisper")


def test_same_request_same_sequence_across_parses() -> None:
    body = chat(
        {"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": data_uri(300, 200)}}
    )
    cfg = PricingConfig(family="gemma4")
    a, b = parse_request(body, {}), parse_request(body, {})
    assert build_sequence(a, price(a, cfg)) == build_sequence(b, price(b, cfg))
