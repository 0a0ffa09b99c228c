"""What a model server would refuse is refused by the gateway, before the body goes upstream: a
missing model, bytes that are not a media file of their part's kind, a modality the served
model's family cannot take. Each refusal is a 400 naming the field, nothing reaches a pod, and
``mmgate.validation`` switches each one off."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.stack import ENCODER_AFFINITY, Stack, png, stack

QWEN3 = "Qwen/Qwen3-VL-32B-Instruct"  # images and video, no audio
GEMMA3 = "google/gemma-3-4b-it"  # images only
DATA = Path(__file__).resolve().parents[1] / "request" / "data"
SERVED = "vllm:request_success_total"
VALIDATION_OFF = "\nmmgate:\n  validation: {model: false, mediaContent: false, modalities: false}\n"


def chat(model: str | None, *parts: dict[str, Any]) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": "What is this?"}, *parts]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "max_tokens": 2}
    if model is not None:
        body["model"] = model
    return orjson.dumps(body)


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def audio(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def video(data: bytes) -> dict[str, Any]:
    url = "data:video/mp4;base64," + base64.b64encode(data).decode()
    return {"type": "video_url", "video_url": {"url": url}}


TEXT_AS_PNG = image("data:image/png;base64,aGVsbG8gd29ybGQ=")  # "hello world"


async def refused(s: Stack, body: bytes) -> dict[str, Any]:
    before = await s.fleet_counter(SERVED)
    reply = await s.post(body)
    assert reply.status == 400, reply.body
    assert await s.fleet_counter(SERVED) == before  # no pod saw it
    error: dict[str, Any] = orjson.loads(reply.body)["error"]
    assert error["type"] == "invalid_request_error"
    return error


async def served(s: Stack, body: bytes) -> int:
    before = await s.fleet_counter(SERVED)
    reply = await s.post(body)
    assert reply.status == 200, reply.body
    assert await s.fleet_counter(SERVED) == before + 1
    return reply.tokens


async def test_a_missing_or_empty_model_is_a_400_naming_model() -> None:
    async with stack(ENCODER_AFFINITY, pods=1) as s:
        for model in (None, "", "  "):
            error = await refused(s, chat(model))
            assert error["param"] == "model" and "model" in error["message"]
        await served(s, chat(s.model))


async def test_text_bytes_in_a_png_data_uri_are_a_400_naming_the_part() -> None:
    async with stack(ENCODER_AFFINITY, pods=1) as s:
        error = await refused(s, chat(s.model, TEXT_AS_PNG))
        assert error["param"] == "messages[0].content[1].image_url.url"
        assert "not an image file" in error["message"]
        clip = (DATA / "clip.mp4").read_bytes()
        mp4_as_png = image("data:image/png;base64," + base64.b64encode(clip).decode())
        error = await refused(s, chat(s.model, mp4_as_png))
        assert "video header (mp4)" in error["message"]
        error = await refused(s, chat(s.model, audio(b"plain text, no RIFF header")))
        assert error["param"] == "messages[0].content[1].input_audio.data"


async def test_a_mislabelled_png_is_priced_as_the_png_it_is() -> None:
    picture = png(3, (640, 480))
    encoded = base64.b64encode(picture).decode()
    async with stack(ENCODER_AFFINITY, pods=1) as s:
        honest = await served(s, chat(s.model, image("data:image/png;base64," + encoded)))
        labelled_jpeg = await served(s, chat(s.model, image("data:image/jpeg;base64," + encoded)))
        assert labelled_jpeg == honest  # the same 640x480 count, not a default size


@pytest.mark.parametrize(
    ("model", "part", "kind"),
    [
        (QWEN3, audio((DATA / "tone.wav").read_bytes()), "audio"),
        (GEMMA3, video((DATA / "clip.mp4").read_bytes()), "video"),
    ],
)
async def test_a_modality_the_family_cannot_take_is_a_400_naming_part_and_model(
    model: str, part: dict[str, Any], kind: str
) -> None:
    async with stack(ENCODER_AFFINITY, pods=1, model=model) as s:
        error = await refused(s, chat(model, part))
        field = "input_audio.data" if kind == "audio" else "video_url.url"
        assert error["param"] == f"messages[0].content[1].{field}"
        assert model in error["message"] and f"does not take {kind}" in error["message"]
        assert error["code"] == "unsupported_modality"


async def test_validation_switched_off_forwards_what_it_would_refuse() -> None:
    async with stack(ENCODER_AFFINITY + VALIDATION_OFF, pods=1, model=QWEN3) as s:
        await served(s, chat(QWEN3, audio((DATA / "tone.wav").read_bytes())))
        reply = await s.post(chat(QWEN3, TEXT_AS_PNG))
        assert reply.endpoint == s.fleet.urls[0].removeprefix("http://")  # forwarded to the pod,
        # which answers for itself (the simulator, like vLLM, cannot decode text as an image)
        reply = await s.post(chat(None))  # routed by model: no pod serves the model ''
        assert reply.status == 404 and orjson.loads(reply.body)["error"]["code"] == "model_not_found"
