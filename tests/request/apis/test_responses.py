"""parse_request on the Responses API: items render like chat turns; mistakes are 400s naming the field."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mmgate.request import Api, Modality, Source, parse_request, role_header
from support.apis import parse, refused
from support.bodies import data_uri, image, image_part

PNG = image("PNG", 1280, 720)


def test_responses_items_render_like_chat_turns_with_the_image_probed() -> None:
    doc = {
        "model": "m",
        "instructions": "Be brief.",
        "stream": True,
        "max_output_tokens": 9,
        "cache_salt": "s",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "What is it?"}]},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_image", "image_url": data_uri(PNG)}],
            },
        ],
    }
    view = parse(Api.RESPONSES, doc)
    assert (view.api, view.model, view.stream, view.max_tokens, view.cache_salt) == (
        Api.RESPONSES,
        "m",
        True,
        9,
        "s",
    )
    (asset,) = view.assets
    assert (asset.modality, asset.source, asset.width, asset.height) == (
        Modality.IMAGE,
        Source.INLINE,
        1280,
        720,
    )
    assert asset.field == "input[1].content[0].image_url"
    chat = parse_request(
        orjson.dumps(
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "What is it?"}]},
                    {"role": "user", "content": [image_part(data_uri(PNG))]},
                ],
            }
        ),
        {},
    )
    # The same prompt as chat: the same text runs around the same asset, so the same prefix.
    assert view.texts == chat.texts
    assert [a.identity for a in view.assets] == [a.identity for a in chat.assets]


def test_responses_string_input_urls_file_ids_files_and_function_calls() -> None:
    view = parse(Api.RESPONSES, {"model": "m", "input": "Hi"})
    assert view.parts == [f"{role_header('user')}Hi\n"] and view.max_tokens is None
    doc = {
        "model": "m",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
                    {"type": "input_image", "file_id": "file-123"},
                    {
                        "type": "input_file",
                        "file_data": "data:application/pdf;base64,JVBERi0=",
                        "filename": "r.pdf",
                    },
                ],
            },
            {"type": "function_call", "name": "lookup", "arguments": '{"q": 1}', "call_id": "c"},
            {"type": "function_call_output", "call_id": "c", "output": "42"},
        ],
    }
    view = parse(Api.RESPONSES, doc)
    url, file, pdf = view.assets
    assert (url.source, url.url, url.detail) == (Source.URL, "https://example.com/a.png", "high")
    assert (file.source, file.identity) == (Source.UUID, "file-123")
    assert (pdf.modality, pdf.detected_format, pdf.field) == (
        Modality.DOCUMENT,
        "pdf",
        "input[0].content[2].file_data",
    )
    text = "".join(view.texts)
    assert "r.pdf" in text and 'lookup({"q": 1})' in text and f"{role_header('tool')}42" in text


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": [{"content": "no role"}]}, "input[0].role"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].image_url",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].file_data",
        ),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "x"}]}]}, "input[0].content[0].type"),
        ({"model": "m", "input": "x", "max_output_tokens": "9"}, "max_output_tokens"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": 3}]}]},
            "input[0].content[0].image_url",
        ),
    ],
)
def test_responses_mistakes_are_400s_naming_the_field(doc: dict[str, Any], param: str) -> None:
    assert refused(Api.RESPONSES, orjson.dumps(doc)).param == param
