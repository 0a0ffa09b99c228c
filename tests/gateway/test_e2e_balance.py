"""End to end: (c) a mix of text-only and four-image requests is balanced by tokens, not counts.

The arrival pattern alternates heavy and light requests: the worst case for counting requests
(round-robin sends every heavy one to the same pod). Tokens are the pods' own prompt counters.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from support.stack import ROUND_ROBIN, Reply, Stack, chat_body, png, stack

pytestmark = pytest.mark.slow

TOKEN_LOAD = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: inflight-load-producer
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: token-load-scorer
"""

HEAVY = 4


async def mixed_burst(s: Stack) -> tuple[Counter[str], Counter[str], dict[str, float]]:
    """Requests per pod, four-image requests per pod, and prompt tokens per pod."""
    images = [png(100 + i, size=(1280, 720)) for i in range(HEAVY * 4)]
    bodies = []
    heavy = set()
    for k in range(HEAVY * 4):
        if k % 2 == 0 and k // 2 < HEAVY:
            heavy.add(k)
            four = images[(k // 2) * 4 : (k // 2) * 4 + 4]
            bodies.append(chat_body(s.model, f"compare these four pictures, case {k}", four))
        else:
            bodies.append(chat_body(s.model, f"say hi, case {k}"))

    async def send(k: int, body: bytes) -> Reply:
        await asyncio.sleep(0.01 * k)  # a fixed arrival order, all in flight together
        return await s.post(body)

    replies = await asyncio.gather(*(send(k, b) for k, b in enumerate(bodies)))
    assert all(r.status == 200 for r in replies), [r.body for r in replies if r.status != 200]
    counts = Counter(s.pod_name(r.endpoint) for r in replies)
    heavy_counts = Counter(s.pod_name(r.endpoint) for k, r in enumerate(replies) if k in heavy)
    tokens = {pod.name: await s.pod_counter(pod.url, "vllm:prompt_tokens_total") for pod in s.fleet}
    return counts, heavy_counts, tokens


async def test_c_mixed_traffic_is_balanced_by_tokens_not_by_request_counts() -> None:
    async with stack(TOKEN_LOAD, pods=2, time_scale=20.0) as s:
        _, heavy, tokens = await mixed_burst(s)
    ratio = max(tokens.values()) / min(tokens.values())
    assert ratio < 1.6, tokens
    assert sorted(heavy.values()) == [HEAVY // 2, HEAVY // 2]  # the expensive requests are shared

    async with stack(ROUND_ROBIN, pods=2, time_scale=20.0) as s:
        rr_counts, rr_heavy, rr_tokens = await mixed_burst(s)
    assert max(rr_counts.values()) == min(rr_counts.values())  # equal request counts...
    assert sorted(rr_heavy.values()) == [HEAVY]  # ...every four-image request on one pod...
    assert max(rr_tokens.values()) / min(rr_tokens.values()) > 3 * ratio  # ...lopsided tokens
