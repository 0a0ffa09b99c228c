"""End to end with real model servers: ``mmgate serve`` in front of ``mmgate engine`` processes
(the tiny Qwen2-VL), through the ``openai`` client.

(a) encoder-cache affinity over two engines: a repeated image goes to the engine that encoded it,
and that engine's own encoder-cache counter says its vision encoder was skipped;
(b) E/PD with real tensors: the gateway sends the image to an encode-only engine, the PD engine
fetches its features instead of encoding, and the reply is the one an engine gives alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from support.processes import REPO, ServerProcess
from support.stack import ENCODER_AFFINITY, data_url, png, server_counter
from support.upstreams import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HITS = "mmgate_engine:encoder_cache_hits_total"
MODEL = "mmgate/tiny-qwen2-vl"


def engine(name: str, *flags: str) -> ServerProcess:
    port = free_port()
    args = ["engine", "--tiny", "qwen2-vl", "--port", str(port), "--name", name, *flags]
    return ServerProcess(args, port, ready_path="/health")  # one torch thread each (the default)


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, ServerProcess]]:
    """Two aggregated engines and an encode-only one, started once (torch takes a while to load)."""
    started = {"e0": engine("e0"), "e1": engine("e1"), "enc": engine("enc", "--mm-encoder-only")}

    async def ready() -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(e.ready(session) for e in started.values()))

    try:
        asyncio.run(ready())
        yield started
    finally:
        logs = [e.stop() for e in started.values()]
        assert all("Traceback" not in log for log in logs), "\n".join(logs)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def gateway(tmp_path: Path, session: aiohttp.ClientSession, config: dict[str, Any]) -> ServerProcess:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    gw = ServerProcess(
        ["serve", "--config", str(path), "--port", str(port), "--no-access-log"], port, ready_path="/ready"
    )
    await gw.ready(session)
    wanted = len(config["mmgate"]["endpoints"])
    for _ in range(1200):  # the gateway routes only to endpoints it has scraped and seen the model of
        async with session.get(gw.url + "/ready") as resp:
            doc = await resp.json()
        scraped = [e for e in doc["endpoints"].values() if e["healthy"] and e["models"]]
        if len(scraped) == wanted:
            return gw
        await asyncio.sleep(0.05)
    gw.stop()
    raise AssertionError(f"the gateway never scraped every engine: {doc}")


def question(text: str, image: bytes) -> Any:
    """The question first, so the prefix cache cannot cover the image: a repeat is served by the
    encoder cache or not at all."""
    content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": data_url(image)}}]
    return [{"role": "user", "content": content}]


async def test_a_repeated_image_goes_to_the_engine_that_encoded_it(
    engines: dict[str, ServerProcess], tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    pair = [engines["e0"], engines["e1"]]
    config = yaml.safe_load(ENCODER_AFFINITY)
    config["mmgate"] = {"endpoints": [e.url for e in pair]}
    gw = await gateway(tmp_path, session, config)
    try:
        client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
        by_endpoint = {e.url.removeprefix("http://"): e for e in pair}

        async def ask(text: str, image: bytes) -> ServerProcess:
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=question(text, image), max_tokens=2
            )
            assert raw.parse().choices[0].finish_reason == "length"
            return by_endpoint[raw.headers["x-mmgate-endpoint"]]

        before = {e.url: await server_counter(session, e.url, HITS) for e in pair}
        images = [png(10), png(11)]
        first = [await ask(f"First look {i}: what is it?", image) for i, image in enumerate(images)]
        for round_ in range(2):
            for i, image in enumerate(images):
                again = await ask(f"Round {round_}, a different question {i}: which colours?", image)
                assert again is first[i], "the repeat left the engine holding the image"
        for e in pair:  # each engine's new hits are the repeats of the images it encoded first
            hits = await server_counter(session, e.url, HITS) - before[e.url]
            assert hits == 2 * sum(1 for f in first if f is e)

        # The engine's stream comes through the gateway as it was sent: the same greedy text.
        messages = question("Stream it: what is it?", images[0])
        whole = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6)
        stream = await client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=6, stream=True
        )
        deltas = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        assert "".join(deltas) == whole.choices[0].message.content
    finally:
        assert "Traceback" not in gw.stop()


async def test_e_pd_through_the_gateway_moves_real_features_and_keeps_the_reply(
    engines: dict[str, ServerProcess], tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    enc, pd, alone = engines["enc"], engines["e0"], engines["e1"]
    config = yaml.safe_load((REPO / "examples" / "e-pd.yaml").read_text())
    config["mmgate"] = {
        "endpoints": [{"url": enc.url, "role": "encode"}, {"url": pd.url, "role": "prefill-decode"}],
        "disaggregation": {"orchestrator": "gateway"},
    }
    gw = await gateway(tmp_path, session, config)
    try:
        messages = question("Read this page aloud.", png(20))
        encoder_s = "mmgate_engine:encoder_seconds_total"
        pd_encoder_before = await server_counter(session, pd.url, encoder_s)
        replies = []
        for url in (gw.url, alone.url):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            chat = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
            replies.append(chat.choices[0].message.content)
        assert replies[0] == replies[1]  # the features crossed processes unchanged
        assert (
            await server_counter(session, pd.url, encoder_s) == pd_encoder_before
        )  # PD fetched, not encoded
        assert await server_counter(session, enc.url, "mmgate_engine:encoder_cache_queries_total") >= 1
    finally:
        assert "Traceback" not in gw.stop()
