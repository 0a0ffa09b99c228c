"""Hostile and malformed input on the KV-event socket, over real ZMQ on loopback.

The subscriber runs in centralised mode (``kvEvents.bind``), where anyone who reaches the port can
send; a test PUB socket connects to it as a pod would and sends what an attacker or a broken
publisher could. After each kind of bad input, a valid batch from the real pod must still be
applied: a bad message costs itself only, and what the subscriber holds stays within its bounds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest
import zmq
import zmq.asyncio

from mmgate.datalayer.endpoints import EndpointRegistry, parse_endpoint
from mmgate.datalayer.kvevents import KVEventsSettings, KVEventSubscriber
from mmgate.datalayer.kvevents.validate import Refusal
from mmgate.datalayer.layer import DataLayer, DataLayerConfig
from mmgate.vllm.kvevents import encode_seq
from support.waiting import until

EP = "127.0.0.1:18000"
TOPIC = f"kv@{EP}@model-a".encode()


def stored_event(*hashes: Any, **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "BlockStored",
        "block_hashes": list(hashes),
        "parent_block_hash": None,
        "token_ids": [1] * 16 * len(hashes),
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
    }
    event.update(overrides)
    return event


def payload(*events: Any, rank: Any = 0, ts: Any = 1.5) -> bytes:
    return msgspec.msgpack.encode([ts, list(events), rank])


class Fleet:
    """A subscriber bound on loopback and a sender connected to it as a pod."""

    def __init__(self, sub: KVEventSubscriber, pub: zmq.asyncio.Socket) -> None:
        self.sub = sub
        self.pub = pub
        self.seq = 0

    async def send(self, *frames: bytes) -> None:
        await self.pub.send_multipart(list(frames))

    async def valid(self, key: int) -> None:
        """The real pod's next batch; waits until it is applied."""
        before = self.batches()
        await self.send(TOPIC, encode_seq(self.seq), payload(stored_event(key)))
        self.seq += 1
        await until(lambda: self.batches() == before + 1, f"valid batch {key} applied")
        assert self.sub.index.holds(EP, key)

    def batches(self) -> int:
        stats = self.sub.stats.get(EP)
        return 0 if stats is None else stats.batches

    def refused(self, why: Refusal) -> int:
        return self.sub.refused[why]


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    context = zmq.asyncio.Context()
    yield context
    context.term()


async def bound_fleet(ctx: zmq.asyncio.Context, **settings: Any) -> Fleet:
    registry = EndpointRegistry()
    registry.add(parse_endpoint(EP))
    config = KVEventsSettings(bind="tcp://127.0.0.1:*", topic_filter="kv@", **settings)
    sub = KVEventSubscriber(registry, config, context=ctx)
    await sub.start()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 0)  # no send-side drops: every hostile message reaches the reader
    pub.connect(sub.bound[0])
    fleet = Fleet(sub, pub)
    for _ in range(400):  # PUB/SUB joins asynchronously: probe with bad framing until counted
        await fleet.send(b"kv@probe")
        await asyncio.sleep(0.005)
        if fleet.refused(Refusal.FRAMING):
            break
    assert fleet.refused(Refusal.FRAMING), "the subscriber never joined"
    return fleet


@pytest.fixture
async def fleet(ctx: zmq.asyncio.Context) -> AsyncIterator[Fleet]:
    made = await bound_fleet(ctx, data_parallel_size=2, max_sequence_gap=1000, queue_size=100_000)
    yield made
    made.pub.close(linger=0)
    await made.sub.stop()


async def sent_and_counted(fleet: Fleet, why: Refusal, messages: list[list[bytes]]) -> None:
    before = fleet.refused(why)
    for frames in messages:
        await fleet.send(*frames)
    await until(lambda: fleet.refused(why) == before + len(messages), f"{len(messages)} refused as {why}")


async def test_out_of_range_ranks_are_refused_and_the_reader_survives(fleet: Fleet) -> None:
    await fleet.valid(1)
    ranks = [2, 3, -1, 2**63 - 1, -(2**63)]
    await sent_and_counted(
        fleet, Refusal.RANK, [[TOPIC, encode_seq(fleet.seq), payload(stored_event(9), rank=r)] for r in ranks]
    )
    await fleet.valid(2)
    assert not fleet.sub.index.holds(EP, 9)
    assert fleet.sub.ingesting() and fleet.sub.readers_failed == 0


async def test_tens_of_thousands_of_ranks_and_topics_hold_no_state(fleet: Fleet) -> None:
    await fleet.valid(1)
    many = 20_000
    # distinct out-of-range ranks, distinct topics naming the known pod, distinct unknown pods
    await sent_and_counted(
        fleet,
        Refusal.RANK,
        [[TOPIC, encode_seq(0), payload(stored_event(9), rank=r)] for r in range(2, 2 + many)],
    )
    before = fleet.sub.unattributed
    for i in range(many):
        await fleet.send(
            f"kv@10.{i // 65536}.{i // 256 % 256}.{i % 256}:1@m".encode(), encode_seq(0), payload()
        )
    await until(lambda: fleet.sub.unattributed == before + many, "unknown pods counted")
    for i in range(many):
        await fleet.send(f"kv@{EP}@m{i}".encode(), encode_seq(fleet.seq), payload(rank=1))
        fleet.seq += 1
    await until(lambda: fleet.batches() == 1 + many, "the renamed topics' batches applied")
    assert fleet.sub.publisher_count() == 2  # (EP, rank 0) and (EP, rank 1), whatever the topics
    await fleet.valid(2)
    assert fleet.sub.ingesting()


async def test_a_spoofed_sequence_jump_is_a_reset_not_a_loss(fleet: Fleet) -> None:
    await fleet.valid(1)
    fleet.seq = 2**62  # the dropped-batches counter would jump by 4.6e18
    await fleet.valid(2)
    stats = fleet.sub.stats[EP]
    assert stats.jumps == 1 and stats.missing == 0 and stats.gaps == 0
    assert not fleet.sub.index.holds(EP, 1)  # forgotten: the publisher counts from elsewhere now
    fleet.seq += 5  # a plausible loss after it is still counted as one
    await fleet.valid(3)
    assert (stats.gaps, stats.missing, stats.jumps) == (1, 5, 1)
    await sent_and_counted(
        fleet, Refusal.SEQUENCE, [[TOPIC, (-5).to_bytes(8, "big", signed=True), payload()]]
    )
    await fleet.valid(4)


def malformed_payloads() -> list[bytes]:
    """A payload broken in each field, by msgpack shape or by value."""
    wrong_field: list[dict[str, Any]] = [
        {"block_hashes": "abc"},
        {"block_hashes": [1.5]},
        {"block_hashes": [[1]]},
        {"block_hashes": [b"x" * 1000]},  # a "digest" longer than any digest
        {"block_hashes": [2**64]},  # wider than msgpack's ints: encoded as... refused on decode
        {"parent_block_hash": [1]},
        {"parent_block_hash": b"y" * 100},
        {"token_ids": ["a"] * 16},
        {"token_ids": [-1] * 16},
        {"token_ids": [1] * 17},  # more tokens than one block of 16 holds
        {"token_ids": None},
        {"block_size": "16"},
        {"block_size": 0},
        {"block_size": -16},
        {"block_size": 2**40},
        {"lora_id": "x"},
        {"medium": 7},
        {"lora_name": [1]},
        {"extra_keys": [None, None]},  # more per-block keys than blocks
        {"extra_keys": "k"},
        {"group_idx": "g"},
        {"type": "BlockExploded"},
        {"type": 7},
    ]
    out = [b"", b"\xc1", b"\x93\xcb", b"\xff" * 64, msgspec.msgpack.encode({"ts": 1})]
    out += [msgspec.msgpack.encode(v) for v in (None, 1, "batch", [], [1.5], [1.5, "events"], [1.5, [1]])]
    out += [payload(rank="0"), payload(rank=1.5), payload(ts="now"), payload(ts=None)]
    out += [payload({"type": "BlockRemoved", "block_hashes": [1], "medium": [1]})]
    out += [payload({"type": "BlockRemoved", "block_hashes": [b"z" * 65], "medium": None})]
    for change in wrong_field:
        try:
            out.append(payload(stored_event(9, **change)))
        except OverflowError:  # msgpack cannot carry it at all
            continue
    marker = msgspec.msgpack.encode("DEEP")  # spliced: a 100,000-deep nest in an ``Any`` field
    nested = payload(stored_event(9, extra_keys=["DEEP"])).replace(marker, b"\x91" * 100_000 + b"\x00")
    return [*out, nested]


async def test_malformed_msgpack_in_every_field_costs_that_batch_only(fleet: Fleet) -> None:
    await fleet.valid(1)
    bad = malformed_payloads()
    for body in bad:
        await fleet.send(TOPIC, encode_seq(fleet.seq), body)
        fleet.seq += 1  # each spends a number, as a real broken batch would
        await fleet.valid(fleet.seq + 1000)  # and the next valid one is applied regardless
    refused = sum(fleet.sub.refused[r] for r in (Refusal.DECODE, Refusal.EVENT, Refusal.RANK))
    assert refused == len(bad)
    assert fleet.sub.refused[Refusal.ERROR] == 0  # every one was caught by validation, none by luck
    assert fleet.sub.ingesting() and fleet.sub.readers_failed == 0


async def test_bad_framing_and_oversized_topics_are_refused(fleet: Fleet) -> None:
    await fleet.valid(1)
    framings: list[list[bytes]] = [
        [TOPIC],
        [TOPIC, encode_seq(0)],
        [TOPIC, b"1234567", payload()],
        [TOPIC, encode_seq(0), payload(), b"extra"],
    ]
    await sent_and_counted(fleet, Refusal.FRAMING, framings)
    await sent_and_counted(fleet, Refusal.TOPIC, [[b"kv@" + b"p" * 5000, encode_seq(0), payload()]])
    await fleet.valid(2)


async def test_publishers_and_blocks_stay_within_their_bounds(ctx: zmq.asyncio.Context) -> None:
    fleet = await bound_fleet(ctx, data_parallel_size=8, max_publishers=3, max_blocks_per_endpoint=100)
    try:
        for rank in range(8):
            await fleet.send(TOPIC, encode_seq(0), payload(stored_event(1000 + rank), rank=rank))
        await until(lambda: fleet.refused(Refusal.PUBLISHERS) == 5, "ranks beyond the bound refused")
        assert fleet.sub.publisher_count() == 3 and fleet.batches() == 3
        for seq in range(1, 51):  # 50 batches of 10 new blocks each on rank 0
            await fleet.send(TOPIC, encode_seq(seq), payload(stored_event(*range(seq * 10, seq * 10 + 10))))
        await until(lambda: fleet.batches() == 53, "the block flood applied")
        assert fleet.sub.index.size(EP) == 100  # the most recent 100; older ones evicted
        assert fleet.sub.index.holds(EP, 509) and not fleet.sub.index.holds(EP, 10)
    finally:
        fleet.pub.close(linger=0)
        await fleet.sub.stop()


async def test_a_message_over_the_size_limit_never_reaches_the_reader(ctx: zmq.asyncio.Context) -> None:
    fleet = await bound_fleet(ctx, max_batch_bytes=4096)
    try:
        await fleet.send(TOPIC, encode_seq(0), payload(stored_event(*range(2000))))  # ~40 KB
        await fleet.send(TOPIC, encode_seq(0), payload(stored_event(1)))
        # ZMQ drops the link of a sender past MAXMSGSIZE; the sender reconnects and is heard again.
        for seq in range(400):
            await fleet.send(TOPIC, encode_seq(seq + 1), payload(stored_event(7)))
            await asyncio.sleep(0.005)
            if fleet.sub.index.holds(EP, 7):
                break
        assert fleet.sub.index.holds(EP, 7) and not fleet.sub.index.holds(EP, 1999)
        assert fleet.sub.ingesting()
    finally:
        fleet.pub.close(linger=0)
        await fleet.sub.stop()


async def test_a_stopped_reader_shows_in_readiness_and_the_gauge(ctx: zmq.asyncio.Context) -> None:
    """A reader whose socket cannot work (an address ZMQ refuses) ends; ingestion says so."""
    layer = DataLayer(
        DataLayerConfig(
            endpoints=[parse_endpoint(EP, kv_events="nosuchtransport://x")], kv_events=KVEventsSettings()
        )
    )
    sub = layer.kv_events
    assert sub is not None
    await sub.start()
    layer.registry.add(parse_endpoint(EP, kv_events="nosuchtransport://x"))
    try:
        await until(lambda: sub.readers_failed == 1, "the reader ended")
        assert not sub.ingesting() and not layer.kv_events_ingesting() and not layer.ready()
        gauge: Callable[[], float] = lambda: next(  # noqa: E731
            s.value
            for m in sub.collector().collect()
            for s in m.samples
            if s.name == "mmgate_kv_events_ingesting"
        )
        assert gauge() == 0
        layer.registry.remove(EP)  # the endpoint whose reader failed leaves: nothing is stale now
        assert sub.ingesting() and gauge() == 1 and sub.readers_failed == 1
    finally:
        await sub.stop()
