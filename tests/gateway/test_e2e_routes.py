"""End to end: every vLLM route through the gateway to simulated pods. Each request is parsed,
priced (``x-mmgate-request-tokens``) and routed like chat, and streams are relayed; the ``openai``
client works against the gateway for the Responses API, embeddings and transcriptions."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from support.media import wav
from support.stack import ENCODER_AFFINITY, ROUND_ROBIN, Stack, chat_body, png, stack

pytestmark = pytest.mark.slow

WHISPER_PRICED = ROUND_ROBIN + "mmgate:\n  pricing:\n    family: whisper\n"
TOKEN_LOAD = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: token-load-scorer
mmgate:
  pricing:
    family: whisper
"""


def upload(model: str, audio: bytes, **fields: str) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("model", model)
    for name, value in fields.items():
        form.add_field(name, value)
    form.add_field("file", audio, filename="speech.wav", content_type="audio/wav")
    return form


async def send(s: Stack, path: str, data: Any) -> tuple[int, int, bytes, str, str]:
    """(status, priced tokens, body, content type, endpoint) of one request through the gateway."""
    kwargs: dict[str, Any] = {"data": data} if isinstance(data, (bytes, aiohttp.FormData)) else {"json": data}
    async with s.session.post(s.url + path, **kwargs) as resp:
        body = await resp.read()
        tokens = int(resp.headers.get("x-mmgate-request-tokens", "0"))
        return (
            resp.status,
            tokens,
            body,
            resp.headers.get("Content-Type", ""),
            resp.headers.get("x-mmgate-endpoint", ""),
        )


def image_url(seed: int) -> str:
    return "data:image/png;base64," + base64.b64encode(png(seed, (1280, 720))).decode()


async def test_responses_with_an_input_image_is_priced_and_routed_like_chat() -> None:
    async with stack(ENCODER_AFFINITY, pods=2) as s:
        url = image_url(1)
        doc = {
            "model": s.model,
            "max_output_tokens": 4,
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is it?"},
                        {"type": "input_image", "image_url": url},
                    ],
                }
            ],
        }
        status, tokens, body, _, _ = await send(s, "/v1/responses", doc)
        assert status == 200, body
        answer = orjson.loads(body)
        assert answer["object"] == "response" and answer["output"][0]["content"][0]["text"]
        chat = {
            "model": s.model,
            "max_tokens": 4,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is it?"},
                        {"type": "image_url", "image_url": {"url": url}},
                    ],
                }
            ],
        }
        chat_status, chat_tokens, _, _, _ = await send(s, "/v1/chat/completions", chat)
        assert chat_status == 200 and tokens == chat_tokens > 880  # the 1280x720 image, priced alike
        async with s.session.post(s.url + "/v1/responses", json={**doc, "stream": True}) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            events = [line for line in (await resp.read()).split(b"\n") if line.startswith(b"event: ")]
        assert events[0] == b"event: response.created" and events[-1] == b"event: response.completed"
        assert events.count(b"event: response.output_text.delta") == 4


async def test_anthropic_messages_reach_a_pod_and_are_priced_like_chat() -> None:
    async with stack(ROUND_ROBIN, pods=2) as s:
        picture = png(2, (1280, 720))
        doc = {
            "model": s.model,
            "max_tokens": 3,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Describe"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(picture).decode(),
                            },
                        },
                    ],
                }
            ],
        }
        status, tokens, body, _, _ = await send(s, "/v1/messages", doc)
        assert status == 200, body
        answer = orjson.loads(body)
        assert answer["type"] == "message" and answer["content"][0]["type"] == "text"
        assert answer["usage"]["output_tokens"] == 3
        _, chat_tokens, _, _, _ = await send(
            s, "/v1/chat/completions", chat_body(s.model, "Describe", [picture])
        )
        assert tokens == chat_tokens > 880


async def test_a_wav_transcription_is_priced_by_whisper_windows_and_streams() -> None:
    async with stack(WHISPER_PRICED, pods=2) as s:
        priced = []
        for seconds in (20.0, 45.0):
            status, tokens, body, _, _ = await send(
                s, "/v1/audio/transcriptions", upload(s.model, wav(seconds))
            )
            assert status == 200, body
            assert orjson.loads(body)["usage"] == {"type": "duration", "seconds": int(seconds)}
            priced.append(tokens)
        assert priced == [1500, 3000]  # one and two started 30-s windows of 1,500 positions
        status, tokens, _, _, _ = await send(s, "/v1/audio/translations", upload(s.model, wav(5.0)))
        assert (status, tokens) == (200, 1500)
        async with s.session.post(
            s.url + "/v1/audio/transcriptions", data=upload(s.model, wav(4.0), stream="true")
        ) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            text = await resp.read()
        assert text.count(b'"object":"transcription.chunk"') >= 2 and text.endswith(b"data: [DONE]\n\n")


async def test_transcriptions_are_spread_by_their_load() -> None:
    # Six 30-s uploads at once (1,500 tokens each, still running when the next is decided):
    # the token-load scorer sees what each pod holds and gives each of three pods two.
    async with stack(TOKEN_LOAD, pods=3, time_scale=5.0) as s:
        uploads = [upload(s.model, wav(30.0 - i / 10)) for i in range(6)]
        replies = await asyncio.gather(*(send(s, "/v1/audio/transcriptions", u) for u in uploads))
    assert [r[0] for r in replies] == [200] * 6
    assert sorted(Counter(r[4] for r in replies).values()) == [2, 2, 2]


async def test_embeddings_scoring_and_tokenizer_routes_are_served_with_their_price() -> None:
    async with stack(ROUND_ROBIN, pods=2) as s:
        status, tokens, body, _, _ = await send(
            s, "/v1/embeddings", {"model": s.model, "input": ["a cat", "a dog"]}
        )
        assert status == 200 and tokens > 0 and len(orjson.loads(body)["data"]) == 2
        mm = {
            "model": s.model,
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url(3)}}]}
            ],
        }
        status, image_tokens, _, _, _ = await send(s, "/v1/embeddings", mm)
        assert status == 200 and image_tokens > 880
        cases: list[tuple[str, dict[str, Any]]] = [
            ("/score", {"text_1": "q", "text_2": ["a", "b"]}),
            ("/v1/rerank", {"query": "q", "documents": ["a", "b"]}),
            ("/classify", {"input": "x"}),
            ("/pooling", {"input": "x"}),
            ("/tokenize", {"prompt": "hello there"}),
            ("/detokenize", {"tokens": [1, 2, 3]}),
        ]
        for path, doc in cases:
            status, tokens, body, _, _ = await send(s, path, {"model": s.model, **doc})
            assert status == 200 and tokens > 0, (path, body)


@pytest.mark.parametrize(
    ("path", "doc", "param"),
    [
        (
            "/v1/responses",
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].image_url",
        ),
        ("/v1/embeddings", {"input": {"a": 1}}, "input"),
        ("/pooling", {}, "input"),
        ("/classify", {"input": "a", "messages": []}, "messages"),
        ("/score", {"queries": ["a", "b"], "documents": ["1", "2", "3"]}, "documents"),
        ("/rerank", {"query": "q"}, "documents"),
        ("/tokenize", {}, "prompt"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/v1/audio/transcriptions", {"file": "not a form"}, "Content-Type"),
        ("/v1/audio/translations", {"file": "not a form"}, "Content-Type"),
    ],
)
async def test_bad_bodies_on_every_new_route_are_openai_shaped_400s(
    path: str, doc: dict[str, Any], param: str
) -> None:
    async with stack(ROUND_ROBIN, pods=1) as s:
        status, _, body, _, _ = await send(s, path, {"model": s.model, **doc})
    error = orjson.loads(body)["error"]
    assert (status, error["param"], error["type"]) == (400, param, "invalid_request_error")


async def test_the_openai_client_through_the_gateway_for_responses_embeddings_and_transcriptions() -> None:
    async with stack(ENCODER_AFFINITY, pods=2) as s:
        client = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="sk-test", max_retries=0)
        try:
            raw = await client.responses.with_raw_response.create(
                model=s.model,
                input=[
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": image_url(4), "detail": "auto"}],
                    }
                ],
                max_output_tokens=3,
            )
            assert int(raw.headers["x-mmgate-request-tokens"]) > 880
            assert raw.parse().output_text
            stream = await client.responses.create(
                model=s.model, input="hello", max_output_tokens=2, stream=True
            )
            assert [e.type async for e in stream][-1] == "response.completed"
            embeddings = await client.embeddings.with_raw_response.create(model=s.model, input="hello")
            assert (
                int(embeddings.headers["x-mmgate-request-tokens"]) > 0
                and embeddings.parse().data[0].embedding
            )
            transcript = await client.audio.transcriptions.with_raw_response.create(
                model=s.model, file=("speech.wav", wav(3.0), "audio/wav")
            )
            assert int(transcript.headers["x-mmgate-request-tokens"]) > 0 and transcript.parse().text
        finally:
            await client.close()
