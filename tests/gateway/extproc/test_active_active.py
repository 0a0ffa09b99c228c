"""Two ``mmgate extproc`` replicas sharing their affinity indexes through a real Redis, in the two
layouts: one real Envoy in front of both (the picker cluster lists both replicas, gRPC health
checks on it), and one Envoy in front of each (as a Gateway with one proxy per zone runs them).
In both: a repeated image sticks to its pod whichever replica decides; Redis going away loses no
request. A replica going away: behind one Envoy, every request that starts once Envoy's health
checks have marked it down is served by the other; with an Envoy each, only its own proxy's
requests fail (fail closed)."""

from __future__ import annotations

import asyncio

import pytest

from mmgate.config.schema import SharedIndexSpec
from support.envoy import EnvoyStack, envoy_stack
from support.redis_server import RedisServer
from support.stack import ENCODER_AFFINITY, chat_body, png, server_counter

pytestmark = pytest.mark.slow


async def post(stack: EnvoyStack, url: str, body: bytes) -> tuple[int, str]:
    async with stack.session.post(url + "/v1/chat/completions", data=body) as resp:
        await resp.read()
        return resp.status, resp.headers.get("x-mmgate-endpoint", "")


async def decided(stack: EnvoyStack, n: int) -> float:
    """How many requests picker replica ``n`` has routed (its own /metrics)."""
    return await server_counter(
        stack.session, f"http://127.0.0.1:{stack.replicas[n].admin_port}", "mmgate_requests_total"
    )


@pytest.mark.parametrize(("proxy", "transport"), [("llm-d", "lean"), ("override-host", "grpcio")])
async def test_one_envoy_in_front_of_two_replicas_spreads_sticks_and_fails_over(
    proxy: str, transport: str, redis_server: RedisServer
) -> None:
    shared = {"sharedIndex": SharedIndexSpec(redis=redis_server.url, keyPrefix=f"one-{proxy}")}
    async with envoy_stack(
        ENCODER_AFFINITY, pods=3, pickers=2, proxy=proxy, transport=transport, mmgate=shared
    ) as stack:
        model = stack.model
        images = [png(60 + i) for i in range(6)]
        first = []
        for i, image in enumerate(images):
            status, endpoint = await post(stack, stack.url, chat_body(model, f"What is {i}?", [image]))
            assert status == 200
            first.append(endpoint)
        assert len(set(first)) >= 2
        await asyncio.sleep(0.3)  # each replica tails the other's changes from Redis

        before = [await decided(stack, n) for n in (0, 1)]
        repeats = []  # Envoy spreads the streams: both replicas decide repeats, to the same pods
        for round_ in range(4):
            for i, image in enumerate(images):
                body = chat_body(model, f"Again {round_} {i}", [image])
                status, endpoint = await post(stack, stack.url, body)
                assert status == 200
                repeats.append(endpoint == first[i])
        assert sum(repeats) / len(repeats) >= 0.9
        shares = [await decided(stack, n) - before[n] for n in (0, 1)]
        assert min(shares) >= 3, shares  # 24 streams: each replica decided a fair part of them

        redis_server.kill()  # the shared index goes away: each replica routes on its own view
        replies = await asyncio.gather(
            *(post(stack, stack.url, chat_body(model, f"No Redis {i}", [images[i % 6]])) for i in range(12))
        )
        assert [s for s, _ in replies] == [200] * 12

        await stack.stop_picker(0)  # its port and connections close, as when the process dies
        await stack.picker_marked_down(0)
        before_1 = await decided(stack, 1)
        replies = await asyncio.gather(
            *(post(stack, stack.url, chat_body(model, f"One left {i}", [images[i % 6]])) for i in range(24))
        )
        assert [s for s, _ in replies] == [200] * 24  # every request after the mark: served
        assert await decided(stack, 1) - before_1 == 24  # by the live replica
        assert sum(e == first[i % 6] for i, (_, e) in enumerate(replies)) >= 22


@pytest.mark.parametrize("transport", ["lean", "grpcio"])
async def test_a_replica_stopped_with_a_drain_behind_one_envoy_costs_no_request(transport: str) -> None:
    """As ``mmgate extproc`` stops on SIGTERM: NOT_SERVING while it still serves (Envoy's checks,
    0.2 s apart here, move new streams to the other replica), then GOAWAY and a grace for the
    streams it holds. Requests keep arriving throughout; none fails."""
    async with envoy_stack(ENCODER_AFFINITY, pods=2, pickers=2, proxy="llm-d", transport=transport) as stack:
        model = stack.model
        statuses: list[int] = []
        stopping = asyncio.Event()

        async def client(k: int) -> None:
            i = 0
            while not stopping.is_set():
                status, _ = await post(stack, stack.url, chat_body(model, f"Client {k} asks {i}"))
                statuses.append(status)
                i += 1

        clients = [asyncio.create_task(client(k)) for k in range(4)]
        await asyncio.sleep(0.5)
        served_before = len(statuses)
        await stack.stop_picker(0, drain_s=1.0, grace_s=5.0)
        await stack.picker_marked_down(0)
        after_stop = len(statuses)
        await asyncio.sleep(0.5)
        stopping.set()
        await asyncio.gather(*clients)
        assert served_before > 0 and len(statuses) > after_stop  # load before, during and after
        assert statuses == [200] * len(statuses)


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
