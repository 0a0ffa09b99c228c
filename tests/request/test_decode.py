"""Cutting inline data URIs out before the JSON decode changes nothing a caller can see."""

from __future__ import annotations

import base64
import json

import msgspec
import pytest

from mmgate.errors import RequestError
from mmgate.request import bodies, parse_request
from mmgate.request.decode import MIN_BODY, CutMediaRef, cut_data_urls, decode_chat
from mmgate.request.layout import scan_chat
from mmgate.request.payload import identity_of
from support.bodies import photo, photo_chat

IMAGE = "data:image/jpeg;base64," + base64.b64encode(photo(seed=7)).decode()


def _chat(*parts: object, **extra: object) -> bytes:
    message = {"role": "user", "content": [{"type": "text", "text": "look"}, *parts]}
    return json.dumps({"model": "m", "messages": [message], **extra}).encode()


def _same_as_full_decode(data: bytes) -> bodies.ChatBody:
    fast, _layout = decode_chat(data)
    assert msgspec.json.encode(fast) == msgspec.json.encode(bodies.CHAT.decode(data))
    return fast


@pytest.mark.parametrize("images", [1, 3])
def test_photo_bodies_decode_identically_and_views_point_into_the_body(images: int) -> None:
    data = photo_chat(images)
    cut = cut_data_urls(data)
    assert cut is not None and len(cut[1]) == images and len(cut[0]) < 4096
    decoded = _same_as_full_decode(data)
    parts = decoded.messages[-1].content
    assert isinstance(parts, list)
    assert all(isinstance(p.image_url, CutMediaRef) for p in parts if p.type == "image_url")  # validated once
    urls = [bytes(p.image_url.url) for p in parts if isinstance(p.image_url, bodies.MediaRef)]
    assert all(url.startswith(b'"data:image/jpeg;base64,') and url.endswith(b'"') for url in urls)
    views = [parse_request(data, {}).assets[i].identity for i in range(len(urls))]
    assert len(set(views)) == len(urls)  # distinct images, hashed from the restored payloads


def test_values_that_are_not_plain_data_url_strings_are_left_to_the_decoder() -> None:
    escaped = IMAGE.replace("image/jpeg", "image\\/jpeg")  # a JSON escape inside the value
    data = _chat(
        {"type": "image_url", "image_url": {"url": IMAGE}},
        {"type": "image_url", "image_url": {"url": escaped}},
        metadata={"note": IMAGE},  # data: under another key
    )
    cut = cut_data_urls(data)
    assert cut is not None and len(cut[1]) == 1  # only the plain url value
    _same_as_full_decode(data)


def test_small_bodies_and_bodies_holding_the_placeholder_are_not_cut() -> None:
    small = _chat({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
    assert len(small) < MIN_BODY and cut_data_urls(small) is None
    sneaky = _chat(
        {"type": "text", "text": "\u0000mmgate-cut:0"}, {"type": "image_url", "image_url": {"url": IMAGE}}
    )
    assert cut_data_urls(sneaky) is None
    _same_as_full_decode(sneaky)


def test_client_errors_read_the_same_with_and_without_the_cut() -> None:
    data = _chat({"type": "image_url", "image_url": {"url": IMAGE}}).replace(b'"role"', b'"rolex"')
    with pytest.raises(RequestError) as error:
        parse_request(data, {})
    assert "role" in error.value.param


def test_text_heavy_bodies_are_left_to_the_decoder() -> None:
    chatter = [{"type": "text", "text": f"line {i}"} for i in range(200)]  # 800+ quotes
    data = _chat(*chatter, {"type": "image_url", "image_url": {"url": IMAGE}})
    assert cut_data_urls(data) is None
    _same_as_full_decode(data)


def test_the_walk_validates_and_hashes_each_long_payload_and_the_parser_uses_that_identity() -> None:
    bad = IMAGE[:-8] + "!!!!" + IMAGE[-4:]  # not base64 near its end: validated and refused
    data = _chat(
        {"type": "image_url", "image_url": {"url": IMAGE}},
        {"type": "image_url", "image_url": {"url": bad}},
        {"type": "image_url", "image_url": {"url": "x", "data:a/b;base64," + "A" * 4000: 1}},  # a key
    )
    layout = scan_chat(data, check_payloads=True)
    assert layout is not None and len(layout.data_urls) == 2
    payload = IMAGE.partition(",")[2].encode()
    start = data.index(payload)
    # Checked on the way: the good payload by its identity; the bad one not at all; the long key's
    # "payload" is recorded too (the walk cannot tell a key yet) but nothing looks it up.
    assert layout.payloads[start] == identity_of(payload)
    assert data.index(b"A" * 4000) in layout.payloads
    bad_start = data.index(bad.partition(",")[2].encode())
    assert bad_start not in layout.payloads
    unchecked = scan_chat(data)
    assert unchecked is not None and not unchecked.payloads  # only when asked
    cut = cut_data_urls(data)
    assert cut is not None and [c[2] for c in cut[1]] == [identity_of(payload)]  # the bad one is left in
    with pytest.raises(RequestError, match="base64"):
        parse_request(data, {})
    good = _chat({"type": "image_url", "image_url": {"url": IMAGE}}, {"type": "text", "text": "again"})
    assert parse_request(good, {}).assets[0].identity == identity_of(payload)
