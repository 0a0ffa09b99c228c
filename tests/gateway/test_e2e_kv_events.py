"""End to end on loopback: simulated pods publish vLLM KV events, and the gateway's block index
mirrors what each pod's prefix cache holds, after evictions, for prompts that reached a pod without
the gateway, and after a prefix-cache reset (``AllBlocksCleared``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable

import aiohttp
import orjson
import pytest
import yaml

from mmgate.config import parse_config
from mmgate.datalayer.kvevents import KVEventSubscriber
from mmgate.gateway.app import Running, build_gateway, start
from mmgate.request.view import Api
from mmgate.sim.fleet import SimFleet
from mmgate.sim.ingest import ingest
from mmgate.sim.server import SimPod
from mmgate.vllm.blocks import BlockHash, event_hash
from mmgate.vllm.kv_events_config import parse_kv_events_config
from support.stack import ROUND_ROBIN
from support.waiting import until

pytestmark = pytest.mark.slow

KV = (
    '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*",'
    ' "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv@{host}:{port}@{model}"}'
)


def body(model: str, n: int) -> bytes:
    text = f"document {n}: " + " ".join(f"line {n}.{k} of the shared report" for k in range(40))
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 2})


def prompt_blocks(pod: SimPod, data: bytes) -> list[BlockHash]:
    """The block keys the pod's prefix cache uses for this request's prompt."""
    seq = ingest(data, {}, Api.CHAT, pod.pricing, natural_output_tokens=2).sequence
    return list(pod.engine.hasher.block_hashes(seq.token_ids, seq.mm_items, None))


@pytest.fixture
async def fleet() -> AsyncIterator[SimFleet]:
    # 48 blocks of 16 tokens: each prompt takes ~20, so later prompts evict earlier ones.
    async with SimFleet(
        pods=2, profile="fast", kv_events=parse_kv_events_config(KV), engine={"num_gpu_blocks": 48}
    ) as f:
        yield f


@pytest.fixture
async def running(fleet: SimFleet) -> AsyncIterator[Running]:
    doc = yaml.safe_load(ROUND_ROBIN)
    doc["mmgate"] = {
        "port": 0,
        "endpoints": [
            {"url": p.url, "kvEvents": p.kv_endpoint, "kvEventsReplay": p.kv_replay_endpoint}
            for p in fleet.pods
        ],
        "kvEvents": {"topicFilter": "kv@"},
    }
    gateway = build_gateway(parse_config(doc, source="<test>"))
    gateway.settings.access_log = False
    up = await start(gateway, port=0)
    yield up
    await up.stop()


def mirrored(sub: KVEventSubscriber, pod: SimPod, universe: list[BlockHash]) -> bool:
    """For every block of every prompt sent: the index says the pod holds it iff the pod does."""
    name = pod.url.removeprefix("http://")
    held: set[Hashable] = set(sub.index.keys_of(name))
    return all((event_hash(k) in held) == pod.engine.is_cached(k) for k in universe)


async def test_the_index_mirrors_each_pods_cache(fleet: SimFleet, running: Running) -> None:
    sub = running.gateway.data.kv_events
    assert sub is not None
    model = fleet.pods[0].model
    universe: list[BlockHash] = []
    async with aiohttp.ClientSession() as http:
        for n in range(8):  # through the gateway (round-robin), then one straight to pod 0
            data = body(model, n)
            universe += prompt_blocks(fleet.pods[0], data)
            async with http.post(running.url + "/v1/chat/completions", data=data) as r:
                assert r.status == 200
        direct = body(model, 100)
        universe += prompt_blocks(fleet.pods[0], direct)
        async with http.post(fleet.pods[0].url + "/v1/chat/completions", data=direct) as r:
            assert r.status == 200
        for pod in fleet.pods:
            await until(lambda pod=pod: mirrored(sub, pod, universe), f"{pod.name} mirrored")
        evicted = [k for k in universe if not any(p.engine.is_cached(k) for p in fleet.pods)]
        assert evicted, "the run was meant to evict"
        name0 = fleet.pods[0].url.removeprefix("http://")
        assert all(event_hash(k) in sub.index.keys_of(name0) for k in prompt_blocks(fleet.pods[0], direct))

        # A prefix-cache reset goes out as AllBlocksCleared with the pod's next step.
        async with http.post(fleet.pods[0].url + "/reset_prefix_cache") as r:
            assert r.status == 200
        after = body(model, 200)
        universe += prompt_blocks(fleet.pods[0], after)
        async with http.post(fleet.pods[0].url + "/v1/chat/completions", data=after) as r:
            assert r.status == 200
        await until(lambda: sub.stats[name0].applied.cleared == 1, "the clear arrived")
        await until(lambda: mirrored(sub, fleet.pods[0], universe), "pod 0 mirrored after the reset")
        held = set(sub.index.keys_of(name0))
        assert {event_hash(k) for k in prompt_blocks(fleet.pods[0], after)} <= held
        assert not any(event_hash(k) in held for k in prompt_blocks(fleet.pods[0], direct))

        text = await (await http.get(running.url + "/metrics")).text()
    assert f'mmgate_kv_events_applied_total{{endpoint="{name0}",type="AllBlocksCleared"}} 1.0' in text
    assert f'mmgate_kv_index_blocks{{endpoint="{name0}"}}' in text
