"""The KV-event subscriber over real ZMQ, against the simulator's vLLM-format publisher.

A "pod" here is the simulator's :class:`KVEventPublisher` (its replay ROUTER buffers every batch it
publishes) plus a live PUB socket the test controls, which sends the very frames the publisher
would, so a test can lose, repeat or reorder batches deterministically, as a full queue or a
restart would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import zmq
import zmq.asyncio

from mmgate.datalayer.endpoints import EndpointRegistry, parse_endpoint
from mmgate.datalayer.kvevents import KVEventsSettings, KVEventSubscriber
from mmgate.datalayer.kvevents.apply import tiers_of
from mmgate.datalayer.kvevents.validate import Refusal
from mmgate.modelserver.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from mmgate.modelserver.kv_publisher import KVEventPublisher, to_wire
from mmgate.vllm.kv_events_config import parse_kv_events_config
from mmgate.vllm.kvevents import WireFormat, encode_batch, encode_seq
from support.waiting import until

EP = "127.0.0.1:18000"
TS = 1.5


def stored(*hashes: int, medium: str = "GPU") -> BlockStored:
    return BlockStored(list(hashes), None, [7] * 16 * len(hashes), 16, [None] * len(hashes), medium)


def removed(*hashes: int, medium: str = "GPU") -> BlockRemoved:
    return BlockRemoved(list(hashes), medium)


@dataclass
class Pod:
    publisher: KVEventPublisher
    live: zmq.asyncio.Socket
    address: str
    fmt: WireFormat
    topic: bytes = b""

    def publish(self, *events: KVEvent) -> tuple[int, bytes]:
        """Publish one batch (buffered for replay); the frames the live stream would carry."""
        seq = self.publisher.publish(list(events), ts=TS)
        payload = encode_batch([to_wire(e, self.fmt) for e in events], self.fmt, TS, 0)
        return seq, payload

    async def send(self, seq: int, payload: bytes) -> None:
        await self.live.send_multipart([self.topic, encode_seq(seq), payload])

    async def step(self, *events: KVEvent) -> int:
        seq, payload = self.publish(*events)
        await self.send(seq, payload)
        return seq


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    context = zmq.asyncio.Context()
    yield context
    context.term()


async def make_pod(
    ctx: zmq.asyncio.Context,
    fmt: WireFormat = WireFormat.CURRENT,
    *,
    live_at: str = "tcp://127.0.0.1:*",
    replay_at: str = "tcp://127.0.0.1:*",
) -> Pod:
    config = parse_kv_events_config(
        '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*",'
        f' "replay_endpoint": "{replay_at}"}}'
    )
    for _ in range(200):  # a port just closed by a "crashed" pod may take a moment to free up
        try:
            publisher = KVEventPublisher(config, fmt=fmt, context=ctx)
            live = ctx.socket(zmq.PUB)
            live.setsockopt(zmq.LINGER, 0)
            try:
                live.bind(live_at)
            except zmq.ZMQError:
                live.close(linger=0)
                await publisher.close()
                raise
            break
        except zmq.ZMQError:
            await asyncio.sleep(0.01)
    publisher.start()
    address = live.getsockopt(zmq.LAST_ENDPOINT)
    assert isinstance(address, bytes)
    return Pod(publisher, live, address.decode(), fmt)


def pings(sub: KVEventSubscriber) -> int:
    """Badly framed messages the subscriber refused (the tests' join probe)."""
    return sub.refused[Refusal.FRAMING]


async def subscribed(
    pod: Pod, ctx: zmq.asyncio.Context, *, replay: bool = True, **settings: object
) -> tuple[KVEventSubscriber, EndpointRegistry]:
    """A started subscriber whose socket has joined the pod's live stream."""
    registry = EndpointRegistry()
    sub = KVEventSubscriber(registry, KVEventsSettings(**settings), context=ctx)  # type: ignore[arg-type]
    await sub.start()
    registry.add(
        parse_endpoint(EP, kv_events=pod.address, kv_replay=pod.publisher.replay_endpoint if replay else None)
    )
    # PUB/SUB joins asynchronously: ping with a bad frame until the subscriber counts one.
    for _ in range(400):
        await pod.live.send_multipart([b"ping"])
        await asyncio.sleep(0.005)
        if pings(sub):
            break
    assert pings(sub), "the subscriber never joined"
    return sub, registry


@pytest.fixture
async def pod(ctx: zmq.asyncio.Context) -> AsyncIterator[Pod]:
    made = await make_pod(ctx)
    yield made
    made.live.close(linger=0)
    await made.publisher.close()


def keys(sub: KVEventSubscriber) -> list[object]:
    return sorted(sub.index.keys_of(EP))  # type: ignore[type-var]


def batches(sub: KVEventSubscriber) -> int:
    stats = sub.stats.get(EP)
    return 0 if stats is None else stats.batches


async def test_stored_removed_and_cleared_are_mirrored_with_their_tier(
    pod: Pod, ctx: zmq.asyncio.Context
) -> None:
    sub, _ = await subscribed(pod, ctx)
    try:
        await pod.step(stored(1, 2, 3))
        await pod.step(stored(3, medium="CPU"))  # offloaded: now on both tiers
        await pod.step(removed(3), removed(2))  # gone from the GPU; 3 stays on CPU
        await until(lambda: batches(sub) == 3, "three batches applied")
        assert keys(sub) == [1, 3]
        assert tiers_of(sub.index.mask_of(EP, 3)) == {"CPU"} and tiers_of(sub.index.mask_of(EP, 1)) == {"GPU"}
        assert sub.index.longest_prefix([1, 3, 4]) == {EP: 2}
        await pod.step(AllBlocksCleared())
        await until(lambda: batches(sub) == 4, "the clear applied")
        assert keys(sub) == []
        s = sub.stats[EP]
        assert (s.applied.stored, s.applied.removed, s.applied.cleared) == (2, 2, 1)
        assert s.gaps == s.resyncs == s.replays == 0
    finally:
        await sub.stop()


async def test_a_gap_is_filled_from_the_replay_socket(pod: Pod, ctx: zmq.asyncio.Context) -> None:
    sub, _ = await subscribed(pod, ctx)
    try:
        await pod.step(stored(1))
        lost = [pod.publish(stored(2)), pod.publish(removed(1))]  # never reach the live stream
        await pod.step(stored(3))
        await until(lambda: batches(sub) == 4, "the gap replayed and the live batch applied")
        assert keys(sub) == [2, 3]
        s = sub.stats[EP]
        assert (s.gaps, s.missing, s.replays, s.replay_failures, s.resyncs) == (1, 2, 1, 0, 0)
        await pod.send(*lost[0])  # a late live copy of a replayed batch is a duplicate
        await pod.step(stored(4))
        await until(lambda: batches(sub) == 5, "the next batch applied")
        assert keys(sub) == [2, 3, 4] and s.duplicates == 1
    finally:
        await sub.stop()


async def test_a_gap_without_replay_forgets_the_endpoint_and_relearns(
    pod: Pod, ctx: zmq.asyncio.Context
) -> None:
    sub, _ = await subscribed(pod, ctx, replay=False)
    try:
        await pod.step(stored(1, 2))
        pod.publish(removed(2))  # lost: the index would claim a block the pod evicted
        await pod.step(stored(9))
        await until(lambda: batches(sub) == 2, "both live batches applied")
        assert keys(sub) == [9]
        s = sub.stats[EP]
        assert (s.gaps, s.missing, s.resyncs) == (1, 1, 1)
    finally:
        await sub.stop()


async def test_a_restarted_pod_is_forgotten(pod: Pod, ctx: zmq.asyncio.Context) -> None:
    sub, _ = await subscribed(pod, ctx, replay=False)
    try:
        await pod.step(stored(1))
        await pod.step(stored(2))
        await until(lambda: batches(sub) == 2, "two batches")
        # A new process publishes from sequence 0 again, with an empty cache.
        _, payload = pod.publish(stored(5))
        await pod.send(0, payload)
        await until(lambda: batches(sub) == 3, "the restart's first batch")
        assert keys(sub) == [5] and sub.stats[EP].resyncs == 1
    finally:
        await sub.stop()


async def test_a_pod_restarted_on_the_same_address_is_forgotten_and_relearned(
    pod: Pod, ctx: zmq.asyncio.Context
) -> None:
    sub, _ = await subscribed(pod, ctx)
    try:
        for h in (1, 2, 3):
            await pod.step(stored(h))
        await until(lambda: batches(sub) == 3, "three batches")
        live_at, replay_at = pod.address, pod.publisher.replay_endpoint
        assert replay_at is not None
        pod.live.close(linger=0)  # the pod dies ...
        await pod.publisher.close()
        new = await make_pod(ctx, live_at=live_at, replay_at=replay_at)  # ... and comes back empty
        try:
            for h in (7, 8, 9):
                new.publish(stored(h))  # lost while the subscriber reconnected
            for _ in range(400):  # rejoin: the subscriber counts the ping once reconnected
                before = pings(sub)
                await new.live.send_multipart([b"ping"])
                await asyncio.sleep(0.005)
                if pings(sub) > before:
                    break
            # seq 3 continues the old numbering: only the dropped connection says it is a new pod
            assert await new.step(stored(10)) == 3
            await until(lambda: keys(sub) == [7, 8, 9, 10], "relearned from the new pod's buffer")
            assert sub.stats[EP].resyncs == 1 and sub.stats[EP].replays == 1
        finally:
            new.live.close(linger=0)
            await new.publisher.close()
    finally:
        await sub.stop()


async def test_joining_late_catches_up_from_the_replay_buffer(pod: Pod, ctx: zmq.asyncio.Context) -> None:
    for h in (1, 2, 3):
        pod.publish(stored(h))  # published before anyone listened
    sub, _ = await subscribed(pod, ctx)
    try:
        await pod.step(removed(1))
        await until(lambda: batches(sub) == 4, "history replayed, then the live batch")
        assert keys(sub) == [2, 3]
        s = sub.stats[EP]
        assert s.replays == 1 and s.gaps == 0 and s.resyncs == 0
    finally:
        await sub.stop()


async def test_the_legacy_array_encoding_is_read_too(ctx: zmq.asyncio.Context) -> None:
    pod = await make_pod(ctx, WireFormat.LEGACY)
    sub, _ = await subscribed(pod, ctx)
    try:
        await pod.step(stored(1, 2))
        lost = pod.publish(removed(2))  # replayed in the legacy reply framing ([seq, payload])
        await pod.step(stored(3))
        await until(lambda: batches(sub) == 3, "legacy batches applied")
        assert keys(sub) == [1, 3] and tiers_of(sub.index.mask_of(EP, 1)) == {"GPU"}
        assert sub.stats[EP].replays == 1 and sub.stats[EP].resyncs == 0
        assert lost[0] == 1
    finally:
        await sub.stop()
        pod.live.close(linger=0)
        await pod.publisher.close()


async def test_removing_the_endpoint_forgets_its_blocks(pod: Pod, ctx: zmq.asyncio.Context) -> None:
    sub, registry = await subscribed(pod, ctx)
    try:
        await pod.step(stored(1, 2))
        await until(lambda: batches(sub) == 1, "applied")
        registry.remove(EP)
        assert sub.index.endpoints() == [] and EP not in sub.stats
        await pod.step(stored(3))  # its socket is closed: nothing comes back
        await asyncio.sleep(0.05)
        assert sub.index.endpoints() == []
    finally:
        await sub.stop()


async def test_a_flood_is_bounded_counted_and_resynced(pod: Pod, ctx: zmq.asyncio.Context) -> None:
    pod.live.setsockopt(zmq.SNDHWM, 16)  # a vLLM publisher drops beyond its hwm too
    sub, _ = await subscribed(pod, ctx, replay=False, queue_size=16, batches_per_tick=8)
    pad = list(range(2048))  # fat batches fill the socket buffers quickly
    try:
        for h in range(1, 6001):  # without yielding: the subscriber cannot keep up
            seq, payload = pod.publish(BlockStored([h], None, pad, len(pad), [None]), removed(h - 1))
            with contextlib.suppress(zmq.Again):
                pod.live.send_multipart([b"", encode_seq(seq), payload], flags=zmq.NOBLOCK)
        last = 6000
        for _ in range(1000):  # then steady traffic until the subscriber has caught up
            last += 1
            await pod.step(stored(last), removed(last - 1))
            await asyncio.sleep(0.002)
            if keys(sub) == [last]:
                break
        assert keys(sub) == [last]  # exactly what the pod holds: nothing stale survived the drops
        s = sub.stats[EP]
        assert s.missing > 0 and s.gaps == s.resyncs >= 1 and s.batches < last
    finally:
        await sub.stop()


async def test_centralised_mode_names_the_pod_in_the_topic(ctx: zmq.asyncio.Context) -> None:
    registry = EndpointRegistry()
    registry.add(parse_endpoint(EP))
    registry.add(parse_endpoint("127.0.0.2:8000"))
    sub = KVEventSubscriber(
        registry, KVEventsSettings(bind="tcp://127.0.0.1:*", topic_filter="kv@"), context=ctx
    )
    await sub.start()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(sub.bound[0])  # the pods connect to the gateway
    try:
        frames = lambda topic, seq, *events: [  # noqa: E731
            topic,
            encode_seq(seq),
            encode_batch([to_wire(e, WireFormat.CURRENT) for e in events], WireFormat.CURRENT, TS, 0),
        ]
        for _ in range(400):  # join: an unknown pod's batches are counted, not applied
            await pub.send_multipart(frames(b"kv@10.9.9.9:8000@m", 0, stored(99)))
            await asyncio.sleep(0.005)
            if sub.unattributed:
                break
        await pub.send_multipart(frames(f"kv@{EP}@model-a".encode(), 0, stored(1, 2)))
        await pub.send_multipart(frames(b"kv@127.0.0.2@model-a", 0, stored(1)))  # by host alone
        await pub.send_multipart(frames(b"other-topic", 0, stored(5)))  # filtered out
        await until(lambda: sub.index.holders(1) == {EP, "127.0.0.2:8000"}, "both pods applied")
        assert sub.index.longest_prefix([1, 2]) == {EP: 2, "127.0.0.2:8000": 1}
        assert sub.index.holders(99) is None and sub.index.holders(5) is None
    finally:
        pub.close(linger=0)
        await sub.stop()
