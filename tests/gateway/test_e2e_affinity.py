"""End to end, gateway + simulated fleet: (a) encoder-cache affinity, (b) prefix stickiness and
the affinity gate letting go under load. Hit ratios are the simulator's own counters."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import pytest

from support.stack import ENCODER_AFFINITY, ROUND_ROBIN, Stack, chat_body, png, stack

pytestmark = pytest.mark.slow

IMAGES = 5  # coprime with the 4 pods, so round-robin walks each image over every pod
ROUNDS = 5
WORDS = ["apple", "river", "quantum", "violin", "granite", "sparrow", "orbit", "lantern", "cactus", "meadow"]


async def run_shared_images(s: Stack) -> tuple[float, dict[int, set[str]]]:
    """Send each image once per round with an unrelated question; return the simulator's encoder
    hit ratio after the first sighting of each image, and where each image went."""
    images = [png(i) for i in range(IMAGES)]
    where: dict[int, set[str]] = defaultdict(set)
    for r in range(ROUNDS):
        for i, image in enumerate(images):
            question = f"{WORDS[(r * 7 + i) % 10]} {r}-{i}: {' '.join(WORDS[(r + i) % 10 :])}?"
            reply = await s.post(chat_body(s.model, question, [image]))
            assert reply.status == 200, reply.body
            where[i].add(reply.endpoint)
    queries = await s.fleet_counter("mmgate_sim:encoder_cache_queries_total")
    hits = await s.fleet_counter("mmgate_sim:encoder_cache_hits_total")
    assert queries == IMAGES * ROUNDS
    return hits / (queries - IMAGES), where


async def test_a_repeated_image_goes_to_the_pod_that_encoded_it() -> None:
    async with stack(ENCODER_AFFINITY, pods=4) as s:
        ratio, where = await run_shared_images(s)
        text = await (await s.session.get(s.url + "/metrics")).text()
    assert ratio >= 0.9
    assert all(len(pods) == 1 for pods in where.values())
    # The gateway's own view agrees: every repeat was believed cached where it was sent.
    assert "mmgate_encoder_cache_hits_total" in text and 'modality="image"' in text

    async with stack(ROUND_ROBIN, pods=4) as s:
        rr_ratio, rr_where = await run_shared_images(s)
    assert rr_ratio <= 0.4  # about 1/N: each image meets every pod once before any repeat hits
    assert all(len(pods) == 4 for pods in rr_where.values())


PREFIX_GATE = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: approx-prefix-cache-producer
- type: inflight-load-producer
- type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.6
    maxTTFTPenaltyMs: 20        # a pod 20 ms of prefill (400 tokens) behind the others lets go
    peakPrefillThroughput: 20000
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: token-load-scorer
"""


def group_body(model: str, group: int, n: int) -> bytes:
    """~825 shared prefix tokens and ~300 of the request's own (text packs 4 bytes per token):
    a 0.73 prefix match, sticky, yet each request adds real prefill work to its pod."""
    system = f"You are assistant #{group}. " + " ".join(f"rule {group}.{k}: be precise." for k in range(150))
    question = f"question {n}: " + " ".join(f"{n}/{k}" for k in range(200))
    return chat_body(model, question, system=system)


async def test_b_prefix_groups_stick_until_their_pod_is_overloaded() -> None:
    async with stack(PREFIX_GATE, pods=4, time_scale=10.0) as s:
        homes: dict[int, str] = {}
        for n in range(4):
            for group in range(4):
                reply = await s.post(group_body(s.model, group, n))
                assert reply.status == 200
                assert homes.setdefault(group, reply.endpoint) == reply.endpoint, "group left its pod"
        assert len(set(homes.values())) >= 2  # groups are spread, not all on one pod
        before = await s.fleet_counter("vllm:prefix_cache_hits_total")
        assert before > 0

        # A burst of one group: its home pod fills with in-flight prefill until the gate opens
        # (one request at a time stays under the 20 ms penalty; two or more do not).
        replies = await asyncio.gather(*(s.post(group_body(s.model, 0, 100 + k)) for k in range(12)))
        assert all(r.status == 200 for r in replies)
        spread = Counter(r.endpoint for r in replies)
        assert spread[homes[0]] >= 1
        assert len(spread) >= 3, spread
