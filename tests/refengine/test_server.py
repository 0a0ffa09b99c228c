"""The reference engine over HTTP on loopback, with the tiny Qwen2-VL and the ``openai`` client:
the simulator's API shapes, vLLM's metrics, KV events over real ZMQ, and a loop that keeps
answering while the model runs on its worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
import zmq
import zmq.asyncio

from mmgate.refengine.runtime import Engine, EngineConfig
from mmgate.refengine.server import ENGINE_HEADER, EngineServer, ServerSettings
from mmgate.refengine.transfer import FeatureClient
from mmgate.refengine.vlm import VisionLanguageModel
from mmgate.request import parse_request
from mmgate.vllm.kv_events_config import parse_kv_events_config
from mmgate.vllm.kvevents import BlockStored, decode_batch
from support.stack import data_url, png, server_counter
from support.waiting import until


def chat(question: str, *images: bytes) -> list[dict[str, Any]]:
    """One user turn: the question first, so two questions about one image share no prefix
    before it (the encoder cache, not the prefix cache, is what a repeat then meets)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": question}]
    content += [{"type": "image_url", "image_url": {"url": data_url(i)}} for i in images]
    return [{"role": "user", "content": content}]


@pytest.fixture
async def server(tiny: VisionLanguageModel) -> AsyncIterator[EngineServer]:
    kv = parse_kv_events_config(
        '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", "topic": "kv@{host}:{port}"}'
    )
    s = EngineServer(Engine(tiny, EngineConfig()), ServerSettings(name="e0", port=0, kv_events=kv))
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def client(server: EngineServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


async def test_openai_client_chats_streams_and_lists_the_model(
    server: EngineServer, client: openai.AsyncOpenAI
) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["mmgate/tiny-qwen2-vl"]

    messages: Any = chat("What is in this picture?", png(1))
    whole = await client.chat.completions.with_raw_response.create(
        model="mmgate/tiny-qwen2-vl", messages=messages, max_tokens=6
    )
    assert whole.headers[ENGINE_HEADER] == "e0"
    answer = whole.parse()
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 6
    assert answer.usage.prompt_tokens > 20  # the template, the question and the image's tokens

    stream = await client.chat.completions.create(
        model="mmgate/tiny-qwen2-vl",
        messages=messages,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas: list[str] = []
    finish: list[str] = []
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            deltas.append(choice.delta.content or "")
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    # Greedy decoding: the stream says what the whole answer said, and the second time the
    # prompt's full blocks came from the prefix cache.
    assert "".join(deltas) == answer.choices[0].message.content
    assert finish == ["length"]
    assert usage is not None and usage.completion_tokens == 6
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens > 0


async def test_a_repeated_image_hits_the_encoder_cache(
    server: EngineServer, client: openai.AsyncOpenAI, session: aiohttp.ClientSession
) -> None:
    hits = "mmgate_engine:encoder_cache_hits_total"
    image = png(2)
    await client.chat.completions.create(model="", messages=chat("Describe it.", image), max_tokens=2)
    assert await server_counter(session, server.url, hits) == 0
    await client.chat.completions.create(model="", messages=chat("Which colour?", image), max_tokens=2)
    assert await server_counter(session, server.url, hits) == 1
    assert await server_counter(session, server.url, "mmgate_engine:encoder_cache_queries_total") == 2
    assert await server_counter(session, server.url, "mmgate_engine:encoder_seconds_total") > 0


async def test_client_mistakes_are_openai_errors_naming_the_field(
    server: EngineServer, session: aiohttp.ClientSession
) -> None:
    url = server.url + "/v1/chat/completions"
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({"messages": chat("hi"), "max_tokens": "many"}, 400, "max_tokens"),
        ({"messages": chat("hi"), "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": chat("hi"), "model": "gpt-4o"}, 404, "model"),
        ({"messages": []}, 400, "messages"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}],
                    }
                ]
            },
            400,
            "messages[0].content[0].image_url.url",
        ),
    ]
    for body, status, param in cases:
        async with session.post(url, json=body) as resp:
            doc = await resp.json()
            assert resp.status == status, doc
            assert set(doc["error"]) == {"message", "type", "param", "code"}
            assert doc["error"]["param"] == param, doc
    async with session.post(url, data=b"{not json") as resp:
        assert resp.status == 400
    # An image whose bytes are no image: the engine refuses it on its thread, still a plain 400.
    broken = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
        }
    ]
    async with session.post(url, json={"messages": broken, "stream": True}) as resp:
        doc = await resp.json()
        assert resp.status == 400 and doc["error"]["param"].startswith("messages[0].content[0]"), doc


async def test_the_loop_answers_while_a_long_stream_runs_and_a_gone_client_aborts_it(
    server: EngineServer, session: aiohttp.ClientSession
) -> None:
    body = {"messages": chat("Go on forever."), "max_tokens": 5000, "ignore_eos": True, "stream": True}
    resp = await session.post(server.url + "/v1/chat/completions", json=body)
    assert resp.status == 200
    first = await resp.content.readline()
    assert first.startswith(b"data: ")
    # The model is busy decoding on its thread; the loop still serves health and scrapes.
    async with session.get(server.url + "/health") as health:
        assert health.status == 200
    assert await server_counter(session, server.url, "vllm:num_requests_running") == 1
    resp.close()  # the client goes away mid-stream
    await until(lambda: server.worker is not None and server.worker.stats.num_running == 0, "abort")
    aborted = await metric_sample(session, server.url, 'finished_reason="abort"')
    assert aborted == 1


async def metric_sample(session: aiohttp.ClientSession, url: str, label: str) -> float:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    return float(next(line for line in text.splitlines() if label in line).rsplit(" ", 1)[1])


async def test_kv_events_carry_the_blocks_the_engine_stored(
    server: EngineServer, client: openai.AsyncOpenAI
) -> None:
    assert server.kv_endpoint is not None
    ctx = zmq.asyncio.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(server.kv_endpoint)
    try:
        messages: Any = chat("Tell me about this picture, at length please. " * 3, png(4))
        for _ in range(50):  # PUB drops what is sent before the subscription is joined: resend
            await client.chat.completions.create(model="", messages=messages, max_tokens=2)
            if await sub.poll(200):
                break
        topic, _seq, payload = await asyncio.wait_for(sub.recv_multipart(), 30)
        assert topic == f"kv@127.0.0.1:{server.port}".encode()
        stored = [e for e in decode_batch(payload).events if isinstance(e, BlockStored)]
        assert stored and all(e.block_size == 16 and len(e.token_ids) % 16 == 0 for e in stored)
        # The blocks covering the image carry its identity, the gateway's own, as vLLM's carry theirs.
        identity = parse_request(orjson.dumps({"messages": messages}), {}).assets[0].identity
        assert identity in str([e.extra_keys for e in stored])
    finally:
        sub.close(linger=0)


async def test_e_pd_over_http_gives_the_aggregated_reply_without_encoding_on_the_prefill_engine(
    tiny: VisionLanguageModel, session: aiohttp.ClientSession
) -> None:
    settings = ServerSettings(name="enc", port=0, encoder_only=True, ec_advertised_host="localhost")
    encoder = EngineServer(Engine(tiny), settings)
    prefill = EngineServer(Engine(tiny, fetch_features=FeatureClient()), ServerSettings(name="pd", port=0))
    alone = EngineServer(Engine(tiny), ServerSettings(name="agg", port=0))
    servers = [encoder, prefill, alone]
    for s in servers:
        await s.start()
    try:
        body: dict[str, Any] = {"messages": chat("Read the page.", png(5), png(6)), "max_tokens": 6}
        async with session.post(encoder.url + "/v1/chat/completions", json=body) as resp:
            encoded = await resp.json()
            assert resp.status == 200, encoded
        params = encoded["ec_transfer_params"]
        identities = [a.identity for a in parse_request(orjson.dumps(body), {}).assets]
        assert list(params) == identities  # keyed by the gateway's identities, as a sidecar looks them up
        assert encoded["usage"]["completion_tokens"] == 0
        assert encoder.ec_address is not None
        assert all(
            (p["remote_host"], p["remote_port"]) == ("localhost", encoder.ec_address[1])
            for p in params.values()
        )

        replies = []
        for target, extra in ((prefill, {"ec_transfer_params": params}), (alone, {})):
            async with session.post(target.url + "/v1/chat/completions", json={**body, **extra}) as resp:
                doc = await resp.json()
                assert resp.status == 200, doc
                replies.append(doc["choices"][0]["message"]["content"])
        assert replies[0] == replies[1]
        assert await server_counter(session, prefill.url, "mmgate_engine:encoder_seconds_total") == 0
        assert await server_counter(session, alone.url, "mmgate_engine:encoder_seconds_total") > 0
    finally:
        for s in servers:
            await s.stop()


class _BrokenEngine(Engine):
    """An engine whose step fails, as a bug in the model code would."""

    def step(self) -> list[Any]:
        raise RuntimeError("boom")


async def test_an_engine_that_fails_answers_503_and_health_says_so(
    tiny: VisionLanguageModel, session: aiohttp.ClientSession
) -> None:
    s = EngineServer(_BrokenEngine(tiny), ServerSettings(port=0))
    await s.start()
    try:
        body = {"messages": chat("hello"), "max_tokens": 2}
        for stream in (False, True):
            async with session.post(s.url + "/v1/chat/completions", json={**body, "stream": stream}) as resp:
                doc = await resp.json()
                assert resp.status == 503 and doc["error"]["type"] == "service_unavailable", doc
        async with session.get(s.url + "/health") as resp:
            assert resp.status == 503
    finally:
        await s.stop()
