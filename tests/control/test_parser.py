"""The parse step (``make_parser``): media parts get their uuids written into the
forwarded body, and a prompt without media is forwarded as it came, whatever its shape."""

from __future__ import annotations

import orjson

from mmgate.control.parser import make_parser
from mmgate.request.limits import Limits
from mmgate.request.pieces import joined
from mmgate.request.view import Api
from support.stack import chat_body, data_url, png

HEADERS = {"Content-Type": "application/json"}


def _forwarded(body: bytes) -> bytes:
    view = make_parser(Limits(own_media_uuids=True))(body, HEADERS, Api.CHAT)
    return joined(view.body)


def test_prompts_without_media_are_forwarded_untouched() -> None:
    turns = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "again", "uuid": "not-a-part"},
        ],
    }
    for body in (chat_body("m", "hello"), orjson.dumps(turns), orjson.dumps({"model": "m", "messages": []})):
        view = make_parser(Limits(own_media_uuids=True))(body, HEADERS, Api.CHAT)
        assert view.body is body


def test_media_parts_get_uuids_with_or_without_text_around_them() -> None:
    alone = orjson.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(png(1))}}]}
            ],
        }
    )
    for body in (alone, chat_body("m", "what is this?", [png(2)]), chat_body("m", "two", [png(3), png(4)])):
        sent = orjson.loads(_forwarded(body))
        parts = sent["messages"][0]["content"]
        media = [p for p in parts if p["type"] == "image_url"]
        assert media and all(len(p["uuid"]) == 32 for p in media)
        assert all("uuid" not in p for p in parts if p["type"] == "text")
    off = make_parser(Limits(own_media_uuids=False))(alone, HEADERS, Api.CHAT)
    assert off.body is alone
