"""Two ``mmgate extproc`` replicas sharing their affinity indexes through a real Redis, each
behind its own real Envoy (as a Gateway with one proxy per zone runs them): a repeated image sticks
to its pod whichever replica decides; Redis going away loses no request; a replica going away
costs only its own proxy's requests.

One Envoy in front of both replicas is not tested for failover: Envoy 1.40 kept opening every
ext_proc stream to the replica it had used first, also after its gRPC health checks marked that
replica down (500s, with the grpc.aio transport as with the lean one); see docs/envoy.md."""

from __future__ import annotations

import asyncio

import pytest

from mmgate.config.schema import SharedIndexSpec
from support.envoy import EnvoyStack, envoy_stack
from support.redis_server import RedisServer
from support.stack import ENCODER_AFFINITY, chat_body, png

pytestmark = pytest.mark.slow


async def post(stack: EnvoyStack, url: str, body: bytes) -> tuple[int, str]:
    async with stack.session.post(url + "/v1/chat/completions", data=body) as resp:
        await resp.read()
        return resp.status, resp.headers.get("x-mmgate-endpoint", "")


@pytest.mark.parametrize("proxy", ["llm-d", "override-host"])
async def test_two_replicas_share_the_pods_images_and_survive_redis_and_each_other(
    proxy: str, redis_server: RedisServer
) -> None:
    shared = {"sharedIndex": SharedIndexSpec(redis=redis_server.url, keyPrefix=f"aa-{proxy}")}
    async with envoy_stack(
        ENCODER_AFFINITY, pods=3, pickers=2, envoy_per_picker=True, proxy=proxy, mmgate=shared
    ) as stack:
        model = stack.model
        one, other = stack.urls
        images = [png(40 + i) for i in range(6)]
        first = []
        for i, image in enumerate(images):  # replica 0 decides where each image goes first
            status, endpoint = await post(stack, one, chat_body(model, f"What is {i}?", [image]))
            assert status == 200
            first.append(endpoint)
        assert len(set(first)) >= 2
        await asyncio.sleep(0.3)  # replica 1 tails the change stream from Redis

        repeats = []  # replica 1 decides the repeats: the same pods
        for round_ in range(3):
            for i, image in enumerate(images):
                status, endpoint = await post(stack, other, chat_body(model, f"Again {round_} {i}", [image]))
                assert status == 200
                repeats.append(endpoint == first[i])
        assert sum(repeats) / len(repeats) >= 0.9

        redis_server.kill()  # the shared index goes away: each replica routes on its own view
        replies = await asyncio.gather(
            *(
                post(stack, (one, other)[i % 2], chat_body(model, f"No Redis {i}", [images[i % 6]]))
                for i in range(12)
            )
        )
        assert [s for s, _ in replies] == [200] * 12

        await stack.stop_picker(0)  # its proxy fails closed; the other replica serves on
        replies = await asyncio.gather(
            *(post(stack, other, chat_body(model, f"One left {i}", [images[i % 6]])) for i in range(12))
        )
        assert [s for s, _ in replies] == [200] * 12
        assert sum(e == first[i % 6] for i, (_, e) in enumerate(replies)) >= 11
