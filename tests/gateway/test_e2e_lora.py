"""LoRA-aware routing over real HTTP: simulated pods serving adapters (``--lora-modules``, one GPU
slot each), the gateway scraping their ``/v1/models`` and ``vllm:lora_requests_info``, and the
``lora-affinity-scorer`` sending adapter requests to the pods that have the adapter loaded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import aiohttp
import orjson
import pytest

from mmgate.sim.fleet import SimFleet
from mmgate.sim.spec import PodSpec
from mmgate.vllm.lora import Adapter
from support.stack import Stack, stack
from support.waiting import until

ADAPTERS = {
    "sql": "/adapters/sql",
    "chat": "/adapters/chat",
    "math": "/adapters/math",
    "code": "/adapters/code",
}

CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: lora-affinity-scorer
- type: active-request-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: lora-affinity-scorer
    weight: 2
  - pluginRef: active-request-scorer
    weight: 1
  - pluginRef: max-score-picker
"""


def body(model: str, *, tokens: int, stream: bool) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": stream,
        }
    )


@pytest.fixture
async def lora_stack() -> AsyncIterator[Stack]:
    specs = [
        PodSpec(name=f"pod-{i}", profile="fast", lora_modules=ADAPTERS, max_loras=1, lora_load_s=0.02)
        for i in range(4)
    ]
    fleet = SimFleet(specs)
    await fleet.start()
    try:
        async with stack(CONFIG, fleet=fleet) as s:
            yield s
    finally:
        await fleet.stop()


async def hold(exits: AsyncExitStack, session: aiohttp.ClientSession, url: str, model: str) -> str:
    """Start a long streamed request and keep it running (until ``exits`` closes); the endpoint."""
    resp = await exits.enter_async_context(
        session.post(url + "/v1/chat/completions", data=body(model, tokens=15_000, stream=True))
    )
    assert resp.status == 200, await resp.read()
    await resp.content.readline()  # the first token: the adapter is loaded and the request runs
    return resp.headers.get("x-mmgate-endpoint", "")


def running(s: Stack, endpoint: str) -> frozenset[str]:
    record = s.running.gateway.data.registry.get(endpoint)
    lora = None if record is None or record.metrics is None else record.metrics.lora
    return frozenset() if lora is None else lora.running


async def test_adapter_requests_go_where_the_adapter_is_loaded_and_spread_when_nowhere(
    lora_stack: Stack,
) -> None:
    s = lora_stack
    pods = [u.removeprefix("http://") for u in s.fleet.urls]
    registry = s.running.gateway.data.registry
    record = registry.get(pods[0])
    assert record is not None and record.adapters == {  # from /v1/models
        name: Adapter(s.model, path) for name, path in ADAPTERS.items()
    }
    async with AsyncExitStack() as exits:
        # pod-0 runs "sql", pod-1 runs "chat" (sent to the pods directly, as other traffic would)
        await hold(exits, s.session, s.fleet.urls[0], "sql")
        await hold(exits, s.session, s.fleet.urls[1], "chat")
        await until(lambda: running(s, pods[0]) == {"sql"} and running(s, pods[1]) == {"chat"}, "scraped")
        for adapter, where in (("sql", pods[0]), ("chat", pods[1])):
            for _ in range(6):
                reply = await s.post(body(adapter, tokens=2, stream=False))
                assert reply.status == 200, reply.body
                assert reply.endpoint == where, (adapter, reply.endpoint)
                assert orjson.loads(reply.body)["model"] == adapter
        # Nobody runs "math" or "code": they go to pods with a free slot, and to different ones.
        landed = [await hold(exits, s.session, s.url, a) for a in ("math", "code")]
        assert sorted(landed) == sorted(pods[2:]), landed
        # The base model is not an adapter: every pod is as good as any other for it.
        for _ in range(4):
            reply = await s.post(body(s.model, tokens=2, stream=False))
            assert reply.status == 200
    loads = {p.name: p.lora.loads for p in s.fleet if p.lora is not None}
    assert loads == {"pod-0": 1, "pod-1": 1, "pod-2": 1, "pod-3": 1}  # each adapter loaded once, where it ran


async def test_a_pod_without_a_free_slot_makes_a_request_wait_and_reports_it(lora_stack: Stack) -> None:
    """The simulator's side: one slot, held by "sql"; a "chat" request waits, shows in
    ``waiting_lora_adapters``, then runs once the slot drains (loading "chat", evicting "sql")."""
    s = lora_stack
    pod = s.fleet.pods[0]
    assert pod.lora is not None
    async with AsyncExitStack() as exits:
        await hold(exits, s.session, pod.url, "sql")
        waiter = asyncio.create_task(
            s.session.post(pod.url + "/v1/chat/completions", data=body("chat", tokens=2, stream=False))
        )
        await until(lambda: pod.lora is not None and pod.lora.waiting == ["chat"], "chat waits for the slot")
        page = await (await s.session.get(pod.url + "/metrics")).read()
        assert b'running_lora_adapters="sql",waiting_lora_adapters="chat"' in page
        assert not waiter.done()
    resp = await waiter
    assert resp.status == 200 and (await resp.json())["model"] == "chat"
    assert pod.lora.resident == ["chat"] and pod.lora.evictions == 1
