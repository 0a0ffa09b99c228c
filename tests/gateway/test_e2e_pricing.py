"""Pricing follows each shipped example config: URL images, URL videos and videos without the
``x-llm-d-video-*`` headers get the configured defaults, counted by the configured rule.

Over real HTTP the gateway's ``x-mmgate-request-tokens`` is what a user reads; per config, the
token-producer the config builds is asked directly (every example, including the E/PD ones whose
fleets need roles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from mmgate.config import load_config
from mmgate.request import Api, parse_request
from mmgate.scheduling import build_scheduler
from mmgate.scheduling.plugins.token_producer import TokenProducer
from mmgate.scheduling.types import SchedulingRequest
from mmgate.tokens import EstimateConfig, PricingConfig, price
from support.stack import stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QWEN3 = "Qwen/Qwen3-VL-32B-Instruct"
HEADERS = {
    "x-llm-d-video-resolution": "640x480",
    "x-llm-d-video-duration-seconds": "4",
    "x-llm-d-video-fps": "30",
}


def body(model: str, part: dict[str, Any] | None) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": "What is in this?"}]
    if part is not None:
        content.append(part)
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 2})


URL_IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/photo.jpg"}}
URL_VIDEO = {"type": "video_url", "video_url": {"url": "https://example.com/clip.mp4"}}


def media_tokens(config: str, model: str, part: dict[str, Any], headers: dict[str, str]) -> int:
    cfg = load_config(EXAMPLES / config)
    scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate)
    (producer,) = [p for p in scheduler.producers if isinstance(p, TokenProducer)]
    view = parse_request(body(model, part), headers, api=Api.CHAT)
    return producer.tokenize(SchedulingRequest(view, "r1")).media_tokens


# llm-d's estimate with image.defaultResolution 1280x720 and no video block: 1280*720/1024 = 900;
# a video is 640x360 (225 per frame) for 10 s sampled at 2 fps = 20 frames -> 4500; with the
# headers 640x480 (300 per frame) for 4 s -> 8 frames -> 2400.
ESTIMATE_1280 = {"image": 900, "video": 4500, "video+headers": 2400}
CASES = {
    "encoder-affinity.yaml": {QWEN3: ESTIMATE_1280},
    "encoder-affinity-gated.yaml": {QWEN3: ESTIMATE_1280},
    "e-pd.yaml": {QWEN3: ESTIMATE_1280},
    "e-p-d.yaml": {QWEN3: ESTIMATE_1280},
    "aggregated.yaml": {
        # exact: Qwen3-VL's own rules (mmgate tokens --family qwen3-vl): 880 + 2 for 1280x720; a
        # 1280x720 10 s video at 24 fps is 8800 + 80; 640x480 for 4 s at 30 fps is 1200 + 32.
        QWEN3: {"image": 882, "video": 8880, "video+headers": 1232},
        # a model id naming no known family: llm-d's estimate with the block's defaults
        # (1280x720 -> 900 per image or frame; 20 sampled frames; 8 with the headers).
        "my-finetune": {"image": 900, "video": 18000, "video+headers": 2400},
    },
}


@pytest.mark.parametrize(
    ("config", "model", "case"),
    [(c, m, k) for c, models in CASES.items() for m, cases in models.items() for k in cases],
)
def test_each_example_prices_unmeasured_media_by_its_configured_defaults(
    config: str, model: str, case: str
) -> None:
    part = URL_IMAGE if case == "image" else URL_VIDEO
    headers = HEADERS if case.endswith("+headers") else {}
    assert media_tokens(config, model, part, headers) == CASES[config][model][case]


def text_tokens(data: bytes) -> int:
    return price(parse_request(data, {}), PricingConfig(family=None, estimate=EstimateConfig())).text_tokens


@pytest.mark.parametrize(
    ("config", "model", "image_tokens"),
    [
        ("encoder-affinity.yaml", "test", 900),
        ("aggregated.yaml", QWEN3, 882),
        ("aggregated.yaml", "test", 900),
    ],
)
async def test_a_url_image_is_priced_by_the_configured_default_over_http(
    config: str, model: str, image_tokens: int
) -> None:
    async with stack((EXAMPLES / config).read_text(), pods=2, model=model) as s:
        one, two = body(model, URL_IMAGE), orjson.loads(body(model, URL_IMAGE))
        two["messages"][0]["content"].append(
            {"type": "image_url", "image_url": {"url": "https://x.test/b.png"}}
        )
        two_bytes = orjson.dumps(two)
        reply = await s.post(one)
        assert reply.status == 200, reply.body
        assert reply.tokens == text_tokens(one) + image_tokens
        reply = await s.post(two_bytes)
        assert reply.status == 200 and reply.tokens == text_tokens(two_bytes) + 2 * image_tokens
