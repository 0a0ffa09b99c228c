"""Precise prefix routing end to end: simulated pods publish KV events, the gateway's
``precise-prefix-cache-producer`` computes the engine's block keys for each request, and routing
follows what the pods really hold, including a prefix that reached a pod without the gateway; with
pseudo tokens, and with engine-exact tokens from a model folder built in the test (pods started
with ``--tokenizer``, the gateway's token-producer in engine mode)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from mmgate.config import parse_config
from mmgate.config.strict import ConfigError
from mmgate.gateway.app import Running, build_gateway, start
from mmgate.request.payload import identity_of
from mmgate.request.view import Api
from mmgate.sim.fleet import SimFleet
from mmgate.sim.ingest import ingest
from mmgate.sim.server import SimPod
from mmgate.vllm.blocks import LoRA, event_hash
from mmgate.vllm.kv_events_config import parse_kv_events_config
from support.stack import data_url, png
from support.tokenizer_dir import model_dir

pytestmark = pytest.mark.slow

KV = (
    '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*",'
    ' "replay_endpoint": "tcp://127.0.0.1:*"}'
)
PRECISE = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: precise-prefix-cache-producer
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: precise-prefix-cache-producer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
"""


def body(model: str, doc: int, question: str, image: bytes | None = None) -> bytes:
    system = f"Document {doc}: " + " ".join(f"clause {doc}.{k} applies." for k in range(50))
    user: Any = question
    if image is not None:
        user = [
            {"type": "image_url", "image_url": {"url": data_url(image)}},
            {"type": "text", "text": question},
        ]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return orjson.dumps({"model": model, "messages": messages, "max_tokens": 2})


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
async def fleet() -> AsyncIterator[SimFleet]:
    async with SimFleet(pods=3, profile="fast", kv_events=parse_kv_events_config(KV)) as f:
        yield f


@pytest.fixture
async def running(fleet: SimFleet) -> AsyncIterator[Running]:
    up = await gateway_for(fleet)
    yield up
    await up.stop()


def block_keys(pod: SimPod, data: bytes) -> list[int]:
    """The keys ``pod`` gives the full blocks of ``data``'s prompt, as its events carry them."""
    seq = ingest(data, {}, Api.CHAT, pod.pricing, natural_output_tokens=2, tokenizer=pod.tokenizer).sequence
    return [int(event_hash(k)) for k in pod.engine.hasher.block_hashes(seq.token_ids, seq.mm_items, None)]


def first_block(pod: SimPod, data: bytes) -> int:
    return block_keys(pod, data)[0]


def image_body(model: str, image: bytes, question: str, uuid: str | None = None) -> bytes:
    part: dict[str, object] = {"type": "image_url", "image_url": {"url": data_url(image)}}
    if uuid is not None:
        part["uuid"] = uuid
    content = [part, {"type": "text", "text": question}]
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 2})


def payload_identity(image: bytes) -> str:
    """The gateway's identity of an inline image: xxh3-128 of its base64 text as sent."""
    return identity_of(data_url(image).split(",", 1)[1])


def gateway_for(fleet: SimFleet, params: dict[str, Any] | None = None, **mmgate: object) -> Running | Any:
    doc = yaml.safe_load(PRECISE)
    if params is not None:
        doc["plugins"][0]["parameters"] = params
    doc["mmgate"] = {
        "port": 0,
        "endpoints": [
            {"url": p.url, "kvEvents": p.kv_endpoint, "kvEventsReplay": p.kv_replay_endpoint}
            for p in fleet.pods
        ],
        **mmgate,
    }
    gateway = build_gateway(parse_config(doc, source="<test>"))
    gateway.settings.access_log = False
    return start(gateway, port=0)


async def test_routing_follows_what_each_pod_reports(fleet: SimFleet, running: Running) -> None:
    sub = running.gateway.data.kv_events
    assert sub is not None
    model = fleet.pods[0].model
    async with aiohttp.ClientSession() as http:
        # Each document reaches one pod directly, never through the gateway.
        for doc, pod in enumerate(fleet.pods):
            data = body(model, doc, "Summarise it.")
            async with http.post(pod.url + "/v1/chat/completions", data=data) as r:
                assert r.status == 200
            name = pod.url.removeprefix("http://")
            key = first_block(pod, data)
            await until(lambda name=name, key=key: sub.index.holds(name, key), f"{name} reported")
        # A follow-up on each document goes where its prefix is (a 1-in-3 guess each without it).
        for doc, pod in enumerate(fleet.pods):
            async with http.post(
                running.url + "/v1/chat/completions", data=body(model, doc, "And the second clause?")
            ) as r:
                assert r.status == 200
                assert r.headers["x-mmgate-endpoint"] == pod.url.removeprefix("http://")


def test_precise_routing_without_kv_events_is_a_config_error() -> None:
    doc = yaml.safe_load(PRECISE)
    doc["mmgate"] = {"endpoints": ["127.0.0.1:9"]}
    with pytest.raises(ConfigError, match=r"mmgate\.kvEvents"):
        build_gateway(parse_config(doc, source="<test>"))


async def test_engine_exact_tokens_end_to_end(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "model")
    transformers = pytest.importorskip("transformers")
    engine = {"family": "qwen3-vl", "tokens": [{"model": "*", "mode": "engine", "tokenizerDir": str(folder)}]}
    kv = parse_kv_events_config(KV)
    async with SimFleet(pods=3, profile="fast", kv_events=kv, tokenizer=str(folder)) as fleet:
        up = await gateway_for(fleet, engine)
        try:
            sub = up.gateway.data.kv_events
            assert sub is not None
            model = fleet.pods[0].model
            reference = transformers.AutoTokenizer.from_pretrained(str(folder))
            async with aiohttp.ClientSession() as http:
                for doc, pod in enumerate(fleet.pods):
                    data = body(model, doc, "Summarise it.", png(doc, (448, 448)))
                    async with http.post(pod.url + "/v1/chat/completions", data=data) as r:
                        assert r.status == 200
                    name = pod.url.removeprefix("http://")
                    # The pod's first block is the hash of the model's own first 16 token ids.
                    system = orjson.loads(data)["messages"][:1]
                    text = reference.apply_chat_template(system, tokenize=False)
                    ids = reference.encode(text, add_special_tokens=False)
                    real = int(event_hash(pod.engine.hasher.block_hashes(ids[:16])[0]))
                    assert first_block(pod, data) == real
                    await until(lambda name=name, key=real: sub.index.holds(name, key), f"{name} reported")
                    pseudo = ingest(data, {}, Api.CHAT, pod.pricing, natural_output_tokens=2).sequence
                    assert not sub.index.holds(
                        name, int(event_hash(pod.engine.hasher.block_hashes(pseudo.token_ids)[0]))
                    )
                # Follow-ups with the same document and image go where it is.
                for doc, pod in enumerate(fleet.pods):
                    data = body(model, doc, "And the second clause?", png(doc, (448, 448)))
                    async with http.post(up.url + "/v1/chat/completions", data=data) as r:
                        assert r.status == 200
                        assert r.headers["x-mmgate-endpoint"] == pod.url.removeprefix("http://")
        finally:
            await up.stop()


async def test_media_blocks_match_because_the_gateway_writes_each_items_uuid(
    fleet: SimFleet, running: Running
) -> None:
    """vLLM keys an image without a uuid by a hash the gateway cannot compute; with the uuid the
    gateway writes, the pod's blocks, its events and the gateway's index all carry one identity."""
    sub = running.gateway.data.kv_events
    assert sub is not None
    model = fleet.pods[0].model
    image = png(21)
    question = "Describe the picture in one sentence, then list every colour you see in it."
    sent = image_body(model, image, question)
    async with aiohttp.ClientSession() as http:
        async with http.post(running.url + "/v1/chat/completions", data=sent) as r:
            assert r.status == 200
            chosen = r.headers["x-mmgate-endpoint"]
        pod = fleet.by_url("http://" + chosen)
        # what the pod received carries the gateway's identity as the part's uuid
        spliced = block_keys(pod, image_body(model, image, question, uuid=payload_identity(image)))
        await until(lambda: all(sub.index.holds(chosen, k) for k in spliced), "the index mirrors the pod")
        own = block_keys(pod, sent)  # the pod's keys had the body gone out without the uuid
        media = next(i for i, (a, b) in enumerate(zip(own, spliced, strict=True)) if a != b)

        # The same image sent straight to another pod (no gateway, no uuid): the pod's own hash.
        other = next(p for p in fleet.pods if p is not pod)
        other_name = other.url.removeprefix("http://")
        async with http.post(other.url + "/v1/chat/completions", data=sent) as r:
            assert r.status == 200
        await until(lambda: sub.index.holds(other_name, own[-1]), "the other pod reported")
        assert not sub.index.holds(other_name, spliced[media])

        # A new question on the same image goes where its image blocks are.
        async with http.post(
            running.url + "/v1/chat/completions", data=image_body(model, image, "What is in the corner?")
        ) as r:
            assert r.status == 200
            assert r.headers["x-mmgate-endpoint"] == chosen


async def test_with_media_uuids_off_the_body_goes_out_as_sent(fleet: SimFleet) -> None:
    up = await gateway_for(fleet, mediaUuids=False)
    try:
        sub = up.gateway.data.kv_events
        assert sub is not None
        model = fleet.pods[0].model
        sent = image_body(model, png(22), "Describe the picture in one sentence, then name its colours.")
        chat = up.url + "/v1/chat/completions"
        async with aiohttp.ClientSession() as http, http.post(chat, data=sent) as r:
            assert r.status == 200
            chosen = r.headers["x-mmgate-endpoint"]
        keys = block_keys(fleet.by_url("http://" + chosen), sent)  # the pod's own media hash
        await until(lambda: all(sub.index.holds(chosen, k) for k in keys), "the pod keyed it itself")
    finally:
        await up.stop()


async def test_an_adapters_blocks_are_keyed_apart_from_the_base_models() -> None:
    """vLLM puts the LoRA adapter into every block key of its requests: the same prompt cached by
    the base model on one pod and by adapter ``sql`` on another must route by model."""
    adapters = {"sql": "/adapters/sql"}
    async with SimFleet(
        pods=3, profile="fast", kv_events=parse_kv_events_config(KV), lora_modules=adapters
    ) as fleet:
        up = await gateway_for(fleet)
        try:
            sub = up.gateway.data.kv_events
            assert sub is not None
            base = fleet.pods[0].model
            async with aiohttp.ClientSession() as http:
                for pod, model in ((fleet.pods[1], "sql"), (fleet.pods[2], base)):
                    data = body(model, 7, "Summarise it.")
                    async with http.post(pod.url + "/v1/chat/completions", data=data) as r:
                        assert r.status == 200
                    seq = ingest(data, {}, Api.CHAT, pod.pricing, natural_output_tokens=2).sequence
                    lora = LoRA(model, adapters[model]) if model in adapters else None
                    key = int(
                        event_hash(pod.engine.hasher.block_hashes(seq.token_ids, seq.mm_items, None, lora)[0])
                    )
                    name = pod.url.removeprefix("http://")
                    await until(lambda name=name, key=key: sub.index.holds(name, key), f"{name} reported")
                # The adapters reach the scheduler with the first metrics scrape after /v1/models
                # listed them (they ride on the metrics snapshot; one scraped before the listing has
                # none): wait for a snapshot that names the adapter, not for the listing.
                await until(
                    lambda: all(
                        (lora := None if r.metrics is None else r.metrics.lora) is not None
                        and "sql" in lora.adapters
                        for r in up.gateway.data.registry.records()
                    ),
                    "adapters known to the scheduler",
                )
                for model, pod in (("sql", fleet.pods[1]), (base, fleet.pods[2])):
                    data = body(model, 7, "And the second clause?")
                    async with http.post(up.url + "/v1/chat/completions", data=data) as r:
                        assert r.status == 200
                        assert r.headers["x-mmgate-endpoint"] == pod.url.removeprefix("http://"), model
        finally:
            await up.stop()
