"""KV events from a serving pod, decoded with a generic msgpack decoder into vLLM's field layout,
against the keys the pod's own prefix cache uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
import zmq
import zmq.asyncio

from mmgate.request.view import Api
from mmgate.sim.fleet import SimFleet
from mmgate.sim.ingest import ingest
from mmgate.vllm.blocks import event_hash
from mmgate.vllm.kv_events_config import parse_kv_events_config
from support.bodies import chat, data_uri, image_part
from support.stack import png

KV = (
    '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*",'
    ' "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv@pod"}'
)
STORED_KEYS = {
    "type",
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def _post(http: aiohttp.ClientSession, url: str, body: bytes) -> dict[str, Any]:
    async with http.post(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200, await r.text()
        doc: dict[str, Any] = await r.json()
        return doc


async def _collect(sub: zmq.asyncio.Socket, until: float = 0.3) -> list[list[bytes]]:
    out = []
    while True:
        try:
            out.append(await asyncio.wait_for(sub.recv_multipart(), until))
        except TimeoutError:
            return out


async def _subscribed(endpoint: str, ctx: zmq.asyncio.Context) -> zmq.asyncio.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@pod")
    sub.connect(endpoint)
    await asyncio.sleep(0.2)  # PUB/SUB joins asynchronously; earlier messages would be dropped
    return sub


async def test_block_stored_events_carry_the_prefix_cache_keys(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast", kv_events=parse_kv_events_config(KV)) as fleet:
        pod = fleet.pods[0]
        assert pod.kv_endpoint is not None
        ctx = zmq.asyncio.Context()
        sub = await _subscribed(pod.kv_endpoint, ctx)
        try:
            image = image_part(data_uri(png(5, (448, 448))))
            body = chat(image, "Describe this picture.", model="test", max_tokens=4, ignore_eos=True)
            await _post(http, pod.url, body)
            messages = await _collect(sub)
        finally:
            sub.close()
            ctx.term()
    assert messages, "no KV events"
    seqs = [int.from_bytes(m[1], "big") for m in messages]
    assert seqs == sorted(seqs) and all(len(m[1]) == 8 for m in messages)
    assert {m[0] for m in messages} == {b"kv@pod"}
    stored: list[dict[str, Any]] = []
    for _topic, _seq, payload in messages:
        ts, events, rank = msgspec.msgpack.decode(payload)
        assert isinstance(ts, float) and rank == 0
        stored += [e for e in events if e["type"] == "BlockStored"]
    assert stored
    for e in stored:
        assert STORED_KEYS <= set(e) <= STORED_KEYS | {"extra_keys"}
        assert e["block_size"] == 16 and e["medium"] == "GPU"
        assert len(e["token_ids"]) == 16 * len(e["block_hashes"])

    # The same request, laid out as the pod did, hashed with the pod's own hasher.
    job = ingest(body, {}, Api.CHAT, pod.pricing, natural_output_tokens=16)
    seq = job.sequence
    keys = pod.engine.hasher.block_hashes(seq.token_ids, seq.mm_items, None)
    assert all(pod.engine.is_cached(k) for k in keys)
    published = [h for e in stored for h in e["block_hashes"]]
    assert published[: len(keys)] == [event_hash(k) for k in keys]
    assert stored[0]["parent_block_hash"] is None
    # token ids and per-block extra keys: media identity and its offset inside the block
    published_tokens = [t for e in stored for t in e["token_ids"]]
    assert published_tokens[: 16 * len(keys)] == list(seq.token_ids[: 16 * len(keys)])
    extras = [x for e in stored for x in (e.get("extra_keys") or [None] * len(e["block_hashes"]))]
    item = seq.mm_items[0]
    for b in range(len(keys)):
        start, end = 16 * b, 16 * b + 16
        overlaps = start < item.offset + item.length and item.offset < end
        assert extras[b] == ([[item.identity, item.offset - start]] if overlaps else None)


async def test_eviction_publishes_block_removed_and_replay_serves_history(
    http: aiohttp.ClientSession,
) -> None:
    kv = parse_kv_events_config(KV)
    async with SimFleet(profile="fast", kv_events=kv, engine={"num_gpu_blocks": 24}) as fleet:
        pod = fleet.pods[0]
        assert pod.kv_endpoint is not None and pod.kv_replay_endpoint is not None
        ctx = zmq.asyncio.Context()
        sub = await _subscribed(pod.kv_endpoint, ctx)
        try:
            for i in range(4):  # each prompt fills ~12 of the 23 usable blocks: older ones get evicted
                text = f"conversation {i}: " + "lorem ipsum dolor sit amet " * 25
                body = msgspec.json.encode(
                    {"model": "test", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
                )
                await _post(http, pod.url, body)
            live = await _collect(sub)
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(pod.kv_replay_endpoint)
            await dealer.send_multipart([b"", (0).to_bytes(8, "big")])
            replayed = []
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), 2)
                if frames[2] == (-1).to_bytes(8, "big", signed=True):
                    break
                replayed.append(frames[1:])
            dealer.close()
        finally:
            sub.close()
            ctx.term()
    events = [e for m in live for e in msgspec.msgpack.decode(m[2])[1]]
    stored = {h for e in events if e["type"] == "BlockStored" for h in e["block_hashes"]}
    removed = [e for e in events if e["type"] == "BlockRemoved"]
    assert removed, "no eviction under memory pressure"
    for e in removed:
        assert set(e) == {"type", "block_hashes", "medium"}
        assert set(e["block_hashes"]) <= stored
    # replay gives the same batches the subscriber saw, topic first
    assert [f[0] for f in replayed] == [b"kv@pod"] * len(replayed)
    assert [f[1:] for f in replayed][-len(live) :] == [m[1:] for m in live]


async def test_legacy_format_and_raw_hashes_by_option(http: aiohttp.ClientSession) -> None:
    kv = parse_kv_events_config(KV)
    async with SimFleet(
        profile="fast", kv_events=kv, kv_events_format="legacy", kv_events_int_hashes=False
    ) as fleet:
        pod = fleet.pods[0]
        assert pod.kv_endpoint is not None
        ctx = zmq.asyncio.Context()
        sub = await _subscribed(pod.kv_endpoint, ctx)
        try:
            body = msgspec.json.encode({"model": "test", "prompt": "x" * 200, "max_tokens": 1})
            async with http.post(pod.url + "/v1/completions", data=body) as r:
                assert r.status == 200
            messages = await _collect(sub)
        finally:
            sub.close()
            ctx.term()
    batch = msgspec.msgpack.decode(messages[0][2])
    assert len(batch) == 2  # [ts, events]: the old envelope had no rank
    first = batch[1][0]
    assert first[0] == "BlockStored" and len(first) == 6
    assert all(isinstance(h, bytes) and len(h) == 32 for h in first[1])


async def test_topic_template_names_each_pod() -> None:
    template = '"topic": "kv@{host}:{port}@{model}"'
    kv = parse_kv_events_config(
        '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", ' + template + "}"
    )
    async with SimFleet(pods=2, profile="fast", kv_events=kv) as fleet:
        topics = [p.publisher.config.topic if p.publisher else None for p in fleet]
        expected = [f"kv@127.0.0.1:{p.port}@test" for p in fleet]
    assert topics == expected and len(set(topics)) == 2


async def test_topic_template_with_an_unknown_placeholder_is_refused() -> None:
    kv = parse_kv_events_config(
        '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", "topic": "{gpu}"}'
    )
    with pytest.raises(ValueError, match="gpu"):
        async with SimFleet(profile="fast", kv_events=kv):
            pass


async def test_a_pasted_vllm_config_with_max_queue_size_one_holds_nothing_back(
    http: aiohttp.ClientSession,
) -> None:
    # vLLM's max_queue_size bounds batches waiting for its publisher thread; a simulated pod sends
    # each step's batch inside the step, so even a bound of 1 never delays or drops one (docs/sim.md).
    kv = parse_kv_events_config(KV[:-1] + ', "max_queue_size": 1, "hwm": 100000, "buffer_steps": 10000}')
    assert kv.max_queue_size == 1
    async with SimFleet(profile="fast", kv_events=kv) as fleet:
        pod = fleet.pods[0]
        assert pod.kv_endpoint is not None
        ctx = zmq.asyncio.Context()
        sub = await _subscribed(pod.kv_endpoint, ctx)
        try:
            for i in range(3):
                text = f"request {i}: " + "lorem ipsum dolor sit amet " * 10
                body = msgspec.json.encode(
                    {"model": "test", "messages": [{"role": "user", "content": text}], "max_tokens": 3}
                )
                await _post(http, pod.url, body)
            messages = await _collect(sub)
        finally:
            sub.close()
            ctx.term()
    seqs = [int.from_bytes(m[1], "big") for m in messages]
    assert len(seqs) >= 3 and seqs == list(range(len(seqs)))  # every batch, in order, none held back
    stored = sum(1 for m in messages for e in msgspec.msgpack.decode(m[2])[1] if e["type"] == "BlockStored")
    assert stored >= 3  # each request's prompt blocks
