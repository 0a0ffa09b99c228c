"""A simulated pod answers every vLLM route in vLLM's shapes, so each can be tried end to end:
Anthropic messages, the Responses API, embeddings, speech to text, scoring and the tokenizer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from mmgate.sim.fleet import SimFleet
from mmgate.sim.server import POD_HEADER
from support.bodies import data_uri
from support.media import wav
from support.stack import png

PNG_URL = data_uri(png(0, (448, 448)))


@pytest.fixture
async def pod() -> AsyncIterator[tuple[str, str]]:
    async with SimFleet(pods=1, profile="fast") as fleet:
        yield fleet.urls[0], fleet.pods[0].model


async def post(url: str, doc: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=doc) as resp:
        assert resp.headers[POD_HEADER] == "pod-0"
        return resp.status, await resp.json()


def sse(text: str) -> list[tuple[str | None, Any]]:
    """(event name, data) of each event of an SSE stream."""
    out: list[tuple[str | None, Any]] = []
    for block in text.strip().split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = "[DONE]" if line[6:] == "[DONE]" else json.loads(line[6:])
        out.append((name, data))
    return out


async def test_messages_answers_anthropic_bodies_and_event_streams(pod: tuple[str, str]) -> None:
    url, model = pod
    doc = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    status, body = await post(url + "/v1/messages", doc)
    assert status == 200 and body["type"] == "message" and body["role"] == "assistant"
    assert body["stop_reason"] == "max_tokens" and body["usage"]["output_tokens"] == 4
    assert body["content"][0]["type"] == "text" and body["content"][0]["text"]
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/messages", json={**doc, "stream": True}) as resp,
    ):
        events = sse(await resp.text())
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "content_block_start"] and names[-3:] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    deltas = [d["delta"]["text"] for n, d in events if n == "content_block_delta"]
    assert len(deltas) == 4 and events[-2][1]["usage"]["output_tokens"] == 4
    assert all(n == d["type"] for n, d in events)


async def test_the_openai_client_reads_responses_embeddings_and_transcriptions(pod: tuple[str, str]) -> None:
    url, model = pod
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    try:
        content: Any = [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": PNG_URL},
        ]
        response = await client.responses.create(
            model=model, input=[{"role": "user", "content": content}], max_output_tokens=5
        )
        assert response.output_text and response.usage is not None
        assert response.usage.output_tokens == 5 and response.usage.input_tokens > 100  # the image is priced
        stream = await client.responses.create(model=model, input="hi", max_output_tokens=3, stream=True)
        kinds = [event.type async for event in stream]
        assert kinds.count("response.output_text.delta") == 3 and kinds[-1] == "response.completed"

        embeddings = await client.embeddings.create(model=model, input=["a", "b", "c"])  # base64 on the wire
        assert [e.index for e in embeddings.data] == [0, 1, 2] and len(embeddings.data[0].embedding) == 32
        assert abs(sum(v * v for v in embeddings.data[0].embedding) - 1.0) < 1e-5

        transcript = await client.audio.transcriptions.create(
            model=model, file=("a.wav", wav(2.0), "audio/wav")
        )
        assert transcript.text
        chunks = await client.audio.transcriptions.create(
            model=model, file=("a.wav", wav(2.0), "audio/wav"), stream=True
        )
        assert len([c async for c in chunks]) >= 2
    finally:
        await client.close()


async def test_a_transcript_is_as_long_as_the_speech(pod: tuple[str, str]) -> None:
    url, model = pod
    lengths = []
    for seconds in (1.0, 10.0):
        data = aiohttp.FormData()
        data.add_field("model", model)
        data.add_field("file", wav(seconds), filename="a.wav", content_type="audio/wav")
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/audio/transcriptions", data=data) as resp:
            doc = await resp.json()
        assert doc["usage"] == {"type": "duration", "seconds": int(seconds)}
        lengths.append(len(doc["text"].split()))
    assert lengths[1] > 3 * lengths[0]


@pytest.mark.parametrize(
    ("path", "doc", "check"),
    [
        (
            "/score",
            {"text_1": "q", "text_2": ["a", "b"]},
            lambda d: [r["index"] for r in d["data"]] == [0, 1],
        ),
        ("/v1/score", {"queries": "q", "documents": ["a"]}, lambda d: d["data"][0]["object"] == "score"),
        (
            "/rerank",
            {"query": "q", "documents": ["a", "b", "c"], "top_n": 2},
            lambda d: len(d["results"]) == 2,
        ),
        ("/v2/rerank", {"query": "q", "documents": ["a"]}, lambda d: "relevance_score" in d["results"][0]),
        ("/classify", {"input": ["x", "y"]}, lambda d: len(d["data"]) == 2 and "probs" in d["data"][0]),
        ("/pooling", {"input": "x", "dimensions": 3}, lambda d: len(d["data"][0]["data"]) == 3),
        ("/v1/embeddings", {"input": "x", "dimensions": 4}, lambda d: len(d["data"][0]["embedding"]) == 4),
        ("/tokenize", {"prompt": "hello there"}, lambda d: d["count"] == len(d["tokens"]) > 0),
        ("/detokenize", {"tokens": [1, 2, 3]}, lambda d: isinstance(d["prompt"], str)),
    ],
)
async def test_pooling_scoring_and_tokenizer_routes_answer_in_vllm_shapes(
    pod: tuple[str, str], path: str, doc: dict[str, Any], check: Any
) -> None:
    url, model = pod
    status, body = await post(url + path, {"model": model, **doc})
    assert status == 200 and check(body), body


async def test_bad_bodies_on_the_new_routes_are_400s_naming_the_field(pod: tuple[str, str]) -> None:
    url, model = pod
    for path, doc, param in [
        ("/v1/responses", {"model": model}, "input"),
        ("/v1/embeddings", {"model": model}, "input"),
        ("/rerank", {"model": model, "query": "q"}, "documents"),
    ]:
        status, body = await post(url + path, doc)
        assert (status, body["error"]["param"]) == (400, param)


@pytest.mark.parametrize(("path", "prompt"), [("/v1/chat/completions", None), ("/v1/completions", "Once")])
async def test_n_choices_are_generated_or_refused_naming_n(
    pod: tuple[str, str], path: str, prompt: str | None
) -> None:
    url, model = pod
    doc: dict[str, Any] = {"model": model, "max_tokens": 4, "n": 2}
    doc.update({"prompt": prompt} if prompt else {"messages": [{"role": "user", "content": "hi"}]})
    status, body = await post(url + path, doc)
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1]
    texts = [c["message"]["content"] if prompt is None else c["text"] for c in body["choices"]]
    assert all(texts) and body["usage"]["completion_tokens"] == 8  # every choice's tokens
    for bad in ({"n": 0}, {"n": 2, "stream": True}):
        status, body = await post(url + path, {**doc, **bad})
        assert status == 400 and body["error"]["param"] == "n", body
