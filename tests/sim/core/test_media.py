"""The front end's media load: what a parsed request makes the API server load, and its price."""

from __future__ import annotations

import pytest

from mmgate.request import parse_request
from mmgate.sim.core import MediaPayload
from mmgate.sim.core.media import load_ms, payloads_of
from mmgate.sim.profiles import MediaLoad, load_profile
from support.bodies import b64, chat, data_uri, image, image_part


def test_payloads_follow_what_the_client_sent() -> None:
    jpeg = image("JPEG", 640, 480)
    body = chat(
        image_part(data_uri(jpeg, "image/jpeg")),
        image_part("https://example.com/cat.png"),
        {"type": "image_url", "uuid": "cached-item"},  # vLLM's cached-item form: no bytes
        image_part(data_uri(jpeg, "image/jpeg")),  # a repeat is loaded again
        "What changed?",
    )
    view = parse_request(body, {"content-type": "application/json"})
    inline, url, again = payloads_of(view.assets)
    assert inline == again
    assert inline.base64_bytes == len(b64(jpeg))
    assert inline.file_bytes == pytest.approx(len(jpeg), abs=2)
    assert (inline.pixels, inline.fmt, inline.url) == (640 * 480, "jpeg", False)
    assert (url.url, url.base64_bytes, url.file_bytes) == (True, 0, 0)


def test_cost_scales_with_bytes_and_pixels() -> None:
    cost = load_profile("qwen3-vl-32b-h200-tp2").media_load
    small = MediaPayload(base64_bytes=100_000, file_bytes=75_000, pixels=640 * 480, fmt="jpeg")
    large = MediaPayload(base64_bytes=400_000, file_bytes=300_000, pixels=1920 * 1080, fmt="jpeg")
    png = MediaPayload(base64_bytes=400_000, file_bytes=300_000, pixels=1920 * 1080, fmt="png")
    assert 0 < load_ms(cost, small) < load_ms(cost, large) < load_ms(cost, png)
    audio = MediaPayload(modality="audio", base64_bytes=400_000, file_bytes=300_000)
    assert cost.per_item_ms < load_ms(cost, audio) < load_ms(cost, large)  # no decode modelled


def test_url_fetch_costs_only_what_the_profile_says() -> None:
    url = MediaPayload(pixels=1_000_000, fmt="jpeg", url=True)
    plain = MediaLoad(per_item_ms=1.0, decode_ms_per_megapixel={"jpeg": 5.0})
    fetching = MediaLoad(per_item_ms=1.0, decode_ms_per_megapixel={"jpeg": 5.0}, url_fetch_ms=40.0)
    assert load_ms(plain, url) == pytest.approx(6.0)
    assert load_ms(fetching, url) == pytest.approx(46.0)
    unknown = MediaPayload(pixels=1_000_000, fmt="webp")
    assert load_ms(MediaLoad(per_item_ms=0.0, other_decode_ms_per_megapixel=9.0), unknown) == pytest.approx(
        9.0
    )


def test_a_part_with_a_uuid_is_loaded_but_not_hashed() -> None:
    """vLLM takes a part's uuid as the item's mm_hash, so it skips the content hash (the gateway
    writes one on every media part by default, mmgate.mediaUuids)."""
    jpeg = data_uri(image("JPEG", 640, 480), "image/jpeg")
    body = chat(image_part(jpeg), {**image_part(jpeg), "uuid": "named-by-the-gateway"}, "Same?")
    plain, named = payloads_of(parse_request(body, {"content-type": "application/json"}).assets)
    assert plain.hashed and not named.hashed and named.base64_bytes == plain.base64_bytes
    cost = MediaLoad(per_item_ms=0.0, base64_ms_per_mib=1.0, hash_ms_per_mib=10.0)
    assert load_ms(cost, plain) - load_ms(cost, named) == pytest.approx(10.0 * plain.file_bytes / 2**20)
