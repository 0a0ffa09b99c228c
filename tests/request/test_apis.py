"""parse_request on vLLM's other APIs: the Responses API, pooling, scoring, tokenizer and audio
uploads read into the same view as chat, and every client mistake a 400 naming the field."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mmgate.errors import RequestError
from mmgate.request import Api, Modality, Source, parse_request, role_header
from support import media
from support.bodies import data_uri, form, form_headers, image, image_part


def parse(api: Api, doc: dict[str, Any]) -> Any:
    return parse_request(orjson.dumps(doc), {}, api=api)


def refused(api: Api, body: bytes, headers: dict[str, str] | None = None) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_request(body, headers or {}, api=api)
    assert caught.value.status == 400
    return caught.value


PNG = image("PNG", 1280, 720)


# --- /v1/responses -------------------------------------------------------------------------------


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
    url, file = view.assets
    assert (url.source, url.url, url.detail) == (Source.URL, "https://example.com/a.png", "high")
    assert (file.source, file.identity) == (Source.UUID, "file-123")
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


# --- /v1/embeddings, /pooling, /classify ----------------------------------------------------------


@pytest.mark.parametrize("api", [Api.EMBEDDINGS, Api.POOLING, Api.CLASSIFY])
def test_pooling_apis_take_completion_inputs_or_chat_messages(api: Api) -> None:
    view = parse(api, {"model": "m", "input": ["a", "b", "c"]})
    assert (view.api, view.parts, view.extra["prompt_count"], view.max_tokens) == (api, ["a", "b", "c"], 3, 0)
    assert parse(api, {"model": "m", "input": [[1, 2], [3]]}).prompt_token_ids == [1, 2, 3]
    view = parse(
        api,
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [image_part(data_uri(PNG)), {"type": "text", "text": "x"}]}
            ],
        },
    )
    assert [a.width for a in view.assets] == [1280] and view.parts[-1] == "x\n"
    assert view.assets[0].field == "messages[0].content[0].image_url.url"


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": "a", "messages": []}, "messages"),
        ({"model": "m", "input": {"a": 1}}, "input"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0]",
        ),
    ],
)
def test_pooling_mistakes_are_400s_naming_the_field(doc: dict[str, Any], param: str) -> None:
    assert refused(Api.EMBEDDINGS, orjson.dumps(doc)).param == param


# --- /score, /rerank -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sides", [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")]
)
def test_score_pairs_one_query_with_each_document(sides: tuple[str, str]) -> None:
    first, second = sides
    view = parse(Api.SCORE, {"model": "m", first: "q ", second: ["d1", "d2"]})
    assert view.parts == ["q d1", "q d2"] and view.extra["prompt_count"] == 2 and view.max_tokens == 0
    assert parse(Api.SCORE, {"model": "m", first: ["a ", "b "], second: ["1", "2"]}).parts == ["a 1", "b 2"]


def test_rerank_documents_may_hold_images() -> None:
    doc = {
        "model": "m",
        "query": "q ",
        "documents": ["d", {"content": [image_part(data_uri(PNG))]}],
        "top_n": 1,
    }
    view = parse(Api.RERANK, doc)
    assert view.parts[:2] == ["q d", "q "] and view.assets[0].field == "documents[1].content[0].image_url.url"


@pytest.mark.parametrize(
    ("api", "doc", "param"),
    [
        (Api.SCORE, {"model": "m", "queries": "q"}, "queries"),
        (Api.SCORE, {"model": "m"}, "queries"),
        (Api.SCORE, {"model": "m", "queries": ["a", "b"], "documents": ["1", "2", "3"]}, "documents"),
        (Api.SCORE, {"model": "m", "queries": [], "documents": ["1"]}, "queries"),
        (Api.SCORE, {"model": "m", "text_1": 1, "text_2": "x"}, "text_1"),
        (Api.RERANK, {"model": "m", "documents": ["a"]}, "query"),
        (Api.RERANK, {"model": "m", "query": "q"}, "documents"),
        (Api.RERANK, {"model": "m", "query": "q", "documents": []}, "documents"),
        (
            Api.RERANK,
            {"model": "m", "query": {"content": [{"type": "nope"}]}, "documents": ["a"]},
            "query.content[0].type",
        ),
    ],
)
def test_scoring_mistakes_are_400s_naming_the_field(api: Api, doc: dict[str, Any], param: str) -> None:
    assert refused(api, orjson.dumps(doc)).param == param


# --- /tokenize, /detokenize ----------------------------------------------------------------------


def test_tokenize_prompt_or_messages_and_detokenize_ids() -> None:
    assert parse(Api.TOKENIZE, {"prompt": "hello"}).parts == ["hello"]
    view = parse(Api.TOKENIZE, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert view.parts == [f"{role_header('user')}hi\n"] and view.model == "m"
    view = parse(Api.DETOKENIZE, {"model": "m", "tokens": [5, 6, 7]})
    assert (view.prompt_token_ids, view.parts, view.max_tokens) == ([5, 6, 7], [], 0)


@pytest.mark.parametrize(
    ("api", "doc", "param"),
    [
        (Api.TOKENIZE, {"model": "m"}, "prompt"),
        (Api.TOKENIZE, {"prompt": "a", "messages": []}, "messages"),
        (Api.TOKENIZE, {"prompt": 3}, "prompt"),
        (Api.DETOKENIZE, {"model": "m"}, "tokens"),
        (Api.DETOKENIZE, {"tokens": ["a"]}, "tokens[0]"),
    ],
)
def test_tokenizer_mistakes_are_400s_naming_the_field(api: Api, doc: dict[str, Any], param: str) -> None:
    assert refused(api, orjson.dumps(doc)).param == param


# --- /v1/audio/transcriptions, /v1/audio/translations --------------------------------------------


@pytest.mark.parametrize("api", [Api.TRANSCRIPTIONS, Api.TRANSLATIONS])
def test_an_uploaded_wav_is_one_audio_asset_with_its_duration_from_its_header(api: Api) -> None:
    audio = media.wav(seconds=45.0)
    body = form(
        ("model", "whisper"),
        ("prompt", "Names: Ada."),
        ("file", ("talk.wav", audio, "audio/wav")),
        ("stream", "true"),
        ("language", "en"),
    )
    view = parse_request(body, form_headers(), api=api)
    (asset,) = view.assets
    assert (view.api, view.model, view.stream, view.parts[0]) == (api, "whisper", True, "Names: Ada.")
    assert (asset.modality, asset.source, asset.detected_format, asset.duration_s) == (
        Modality.AUDIO,
        Source.INLINE,
        "wav",
        45.0,
    )
    assert (asset.field, asset.mime, asset.payload_size, asset.probed) == (
        "file",
        "audio/wav",
        len(audio),
        True,
    )
    assert view.extra["language"] == "en" and view.body is body


def test_an_upload_without_a_duration_in_its_header_takes_the_llm_d_header() -> None:
    body = form(("model", "whisper"), ("file", ("x.bin", b"\x00" * 64, "application/octet-stream")))
    view = parse_request(
        body, {**form_headers(), "x-llm-d-audio-duration-seconds": "12"}, api=Api.TRANSCRIPTIONS
    )
    assert view.assets[0].duration_s == 12.0 and view.stream is False


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        (form(("model", "whisper")), form_headers(), "file"),
        (form(("file", ("a.wav", b"", "audio/wav"))), form_headers(), "file"),
        (form(("file", ("a.wav", media.wav(), "audio/wav")), ("stream", "maybe")), form_headers(), "stream"),
        (form(("model", "w")), {"content-type": "application/json"}, "Content-Type"),
        (b"--x\r\nbroken", form_headers(), "body"),
    ],
)
def test_audio_upload_mistakes_are_400s_naming_the_field(
    body: bytes, headers: dict[str, str], param: str
) -> None:
    assert refused(Api.TRANSCRIPTIONS, body, headers).param == param
