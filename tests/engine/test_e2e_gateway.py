"""End to end with real model servers: ``mmgate serve`` in front of two ``mmgate engine`` processes
(the tiny Qwen2-VL), through the ``openai`` client. A repeated image goes to the engine that
encoded it, and that engine's own encoder-cache counter says its vision encoder was skipped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from support.processes import ServerProcess
from support.stack import ENCODER_AFFINITY, data_url, png, server_counter
from support.upstreams import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HITS = "mmgate_engine:encoder_cache_hits_total"


def engine(name: str) -> ServerProcess:
    port = free_port()
    args = ["engine", "--tiny", "qwen2-vl", "--port", str(port), "--name", name]
    return ServerProcess(args, port, ready_path="/health")  # one torch thread each (the default)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_a_repeated_image_goes_to_the_engine_that_encoded_it(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    engines = [engine("e0"), engine("e1")]
    gateway: ServerProcess | None = None
    try:
        config = yaml.safe_load(ENCODER_AFFINITY)
        config["mmgate"] = {"endpoints": [e.url for e in engines]}
        path = tmp_path / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        gateway = ServerProcess(
            ["serve", "--config", str(path), "--port", str(port), "--no-access-log"],
            port,
            ready_path="/ready",
        )
        await asyncio.gather(*(e.ready(session) for e in engines), gateway.ready(session))
        await until_both_scraped(session, gateway.url)

        client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
        by_url = {e.url.removeprefix("http://"): e for e in engines}

        async def ask(question: str, image: bytes) -> ServerProcess:
            # The question comes first, so the prefix cache cannot cover the image: a repeat is
            # served by the encoder cache or not at all.
            content: Any = [
                {"type": "text", "text": question},
                {"type": "image_url", "image_url": {"url": data_url(image)}},
            ]
            raw = await client.chat.completions.with_raw_response.create(
                model="mmgate/tiny-qwen2-vl", messages=[{"role": "user", "content": content}], max_tokens=2
            )
            assert raw.parse().choices[0].finish_reason == "length"
            return by_url[raw.headers["x-mmgate-endpoint"]]

        images = [png(10), png(11)]
        first = [await ask(f"First look {i}: what is it?", image) for i, image in enumerate(images)]
        assert [await server_counter(session, e.url, HITS) for e in engines] == [0, 0]
        for round_ in range(2):
            for i, image in enumerate(images):
                again = await ask(f"Round {round_}, a different question {i}: which colours?", image)
                assert again is first[i], "the repeat left the engine holding the image"
        hits = {e.url: await server_counter(session, e.url, HITS) for e in engines}
        for e in engines:  # each engine's hits are the repeats of the images it encoded first
            assert hits[e.url] == 2 * sum(1 for f in first if f is e)
        assert sum(hits.values()) == 4
    finally:
        logs = [e.stop() for e in engines] + ([gateway.stop()] if gateway is not None else [])
        assert all("Traceback" not in log for log in logs), "\n".join(logs)


async def until_both_scraped(session: aiohttp.ClientSession, url: str) -> None:
    """The gateway has scraped both engines and seen their model (it routes only to those)."""
    for _ in range(1200):
        async with session.get(url + "/ready") as resp:
            doc = await resp.json()
        endpoints = doc["endpoints"].values()
        if len(endpoints) == 2 and all(e["healthy"] and e["models"] for e in endpoints):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the gateway never scraped both engines: {doc}")
