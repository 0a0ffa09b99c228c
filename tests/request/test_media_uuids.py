"""The gateway's media identities spliced into chat bodies as each part's ``uuid``: the result is
the JSON a re-serialisation would give, parts with a uuid keep theirs, and nothing lands on the
wrong part, whatever the body's layout."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from mmgate.errors import RequestError
from mmgate.request import parse_request
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import part_ends, uuids_to_write, with_media_uuids
from mmgate.request.payload import identity_of
from mmgate.request.view import Api, RequestView
from support.stack import data_url, png

OWN = Limits(own_media_uuids=True)


def parsed(doc: dict[str, Any] | bytes, api: Api = Api.CHAT, limits: Limits = OWN) -> RequestView:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_request(body, {}, api=api, limits=limits)


def image_part(seed: int, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(png(seed))}, **extra}


def expected(doc: dict[str, Any]) -> dict[str, Any]:
    """What re-serialising would give: each media part without a uuid gets its payload's identity."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for message in out["messages"]:
        if not isinstance(message.get("content"), list):
            continue
        for part in message["content"]:
            if part.get("uuid") is not None:
                continue
            for field in ("image_url", "video_url", "audio_url"):
                ref = part.get(field)
                if ref is not None:
                    url = ref if isinstance(ref, str) else ref["url"]
                    payload = url.split(",", 1)[1] if url.startswith("data:") else url
                    part["uuid"] = identity_of(payload)
            if "input_audio" in part:
                part["uuid"] = identity_of(part["input_audio"]["data"])
    return out


def test_each_media_part_without_a_uuid_gets_its_identity_and_the_rest_is_byte_identical() -> None:
    doc = {
        "model": "m",
        "messages": [
            {"role": "system", "content": 'Quote "this" \\ and that \u00e9.'},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": 'a "quoted" \\" tricky } ] { [ text'},
                    image_part(1, detail="ignored"),
                    image_part(2, uuid="client-chosen"),
                    {"type": "image_url", "image_url": "https://example.com/cat.png"},
                    image_part(1),  # a repeat: its own part gets the same identity
                ],
            },
        ],
        "max_tokens": 3,
    }
    view = parsed(doc)
    out = with_media_uuids(view)
    assert json.loads(out) == expected(doc)
    assert json.loads(out)["messages"][1]["content"][2]["uuid"] == "client-chosen"
    # only the inserted members differ from the client's bytes
    members = {f',"uuid":"{i}"'.encode() for i in uuids_to_write(view).values()}
    assert len(members) == 2  # the repeat's identity is the first image's
    stripped = out
    for member in members:
        stripped = stripped.replace(member, b"")
    assert stripped == view.body and len(out) == len(view.body) + sum(
        len(f',"uuid":"{i}"') for i in uuids_to_write(view).values()
    )


def test_pretty_printed_and_large_bodies_are_spliced_the_same() -> None:
    padded = png(3) + random.Random(3).randbytes(100_000)  # bytes after IEND: still a PNG header
    big = {"type": "image_url", "image_url": {"url": data_url(padded)}}
    doc = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, big]}]}
    for body in (json.dumps(doc, indent=2).encode(), orjson.dumps(doc)):
        view = parsed(body)
        assert len(body) > 64 * 1024  # the cut path of decode_chat
        assert json.loads(with_media_uuids(view)) == expected(doc)


def test_an_explicit_null_uuid_is_overridden_by_the_last_member() -> None:
    doc = {"model": "m", "messages": [{"role": "user", "content": [image_part(4, uuid=None)]}]}
    view = parsed(doc)
    assert json.loads(with_media_uuids(view))["messages"][0]["content"][0]["uuid"] == view.assets[0].identity


def test_audio_and_type_less_parts_are_covered() -> None:
    doc = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"image_url": {"url": data_url(png(5))}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                ],
            }
        ],
    }
    view = parse_request(json.dumps(doc).encode(), {}, api=Api.CHAT, limits=Limits(check_media_content=False))
    assert json.loads(with_media_uuids(view)) == expected(doc)


def test_bodies_without_media_or_of_other_apis_are_returned_as_they_are() -> None:
    text = parsed({"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    assert with_media_uuids(text) is text.body
    anthropic = {
        "model": "m",
        "max_tokens": 4,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}],
            }
        ],
    }
    view = parsed(anthropic, api=Api.MESSAGES)
    assert view.assets and with_media_uuids(view) is view.body


def test_a_repeated_key_leaves_the_body_alone() -> None:
    """Decoders disagree on which copy of a repeated key counts, so a uuid could name another
    item than the one the model server reads: nothing is written."""
    part = json.dumps(image_part(6))
    for body in (
        b'{"model":"m","messages":[],"messages":[{"role":"user","content":[' + part.encode() + b"]}]}",
        b'{"model":"m","messages":[{"role":"user","content":[],"content":[' + part.encode() + b"]}]}",
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":'
        b'{"url":"https://a.example/x.png"},"image_url":{"url":"https://b.example/y.png"}}]}]}',
    ):
        view = parsed(body)
        assert with_media_uuids(view) is view.body


def test_part_ends_finds_each_part_whatever_the_nesting() -> None:
    body = (
        b'{"tools":[{"a":[{"b":"}"}]}],"messages":[{"role":"user","content":"x"},'
        b'{"role":"user","content":[{"type":"text","text":"\\\\"},{"k":{"n":[1,2,{"z":"]"}]}}]}]}'
    )
    ends = part_ends(body, [(1, 0), (1, 1)])
    assert ends is not None
    assert body[ends[(1, 0)]] == ord("}") and body[: ends[(1, 0)] + 1].endswith(b'"\\\\"}')
    assert body[ends[(1, 1)] - 4 : ends[(1, 1)] + 1] == b'"]"}]}}'[-5:]


def test_random_layouts_give_what_re_serialising_gives() -> None:
    rng = random.Random(7)
    images = [png(i) for i in range(4)]
    for _ in range(40):
        messages: list[dict[str, Any]] = []
        for _m in range(rng.randint(1, 4)):
            content: list[dict[str, Any]] = []
            for _p in range(rng.randint(0, 4)):
                if rng.random() < 0.4:
                    text = "".join(rng.choice('ab "\\}{][,:\u00e9') for _ in range(rng.randint(0, 12)))
                    content.append({"type": "text", "text": text})
                else:
                    extra = {"uuid": f"u-{rng.randint(0, 9)}"} if rng.random() < 0.3 else {}
                    content.append(
                        {"type": "image_url", "image_url": {"url": data_url(rng.choice(images))}, **extra}
                    )
            messages.append({"role": rng.choice(["user", "assistant"]), "content": content or "plain"})
        doc = {"messages": messages, "model": "m", "stream": rng.random() < 0.5}
        body = json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5).encode()
        assert json.loads(with_media_uuids(parsed(body))) == expected(doc)


def test_a_client_uuid_in_the_gateways_form_must_name_the_parts_own_data() -> None:
    """Otherwise a client could have vLLM cache its own image under the identity of someone
    else's, and the gateway would then send theirs under that uuid."""
    mine, theirs = png(8), png(9)
    forged = identity_of(data_url(theirs).split(",", 1)[1])
    doc = {"model": "m", "messages": [{"role": "user", "content": [image_part(8, uuid=forged)]}]}
    with pytest.raises(RequestError) as caught:
        parsed(doc)
    assert caught.value.status == 400 and caught.value.param == "messages[0].content[0].uuid"
    honest = identity_of(data_url(mine).split(",", 1)[1])
    assert parsed({**doc, "messages": [{"role": "user", "content": [image_part(8, uuid=honest)]}]}).assets
    # a reference to a cached item (no data) and other forms are the client's business
    ref = {"type": "image_url", "uuid": forged}
    cached = parsed({"model": "m", "messages": [{"role": "user", "content": [ref]}]})
    assert cached.assets[0].identity == forged
    assert parsed(doc, limits=Limits()).assets[0].identity == forged  # mediaUuids off: not checked
