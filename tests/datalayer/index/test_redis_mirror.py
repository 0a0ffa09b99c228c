"""Indexes mirrored through a real Redis: what one process records, another one sees; a Redis that
goes away costs only freshness, and the views converge again when it returns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis

from mmgate.datalayer.index.redis_mirror import RedisIndexes, SharedIndexSettings
from support.redis_server import RedisServer
from support.waiting import until

NS = "approx-prefix-cache-producer/approx-prefix-cache-producer"


def provider(url: str) -> RedisIndexes:
    return RedisIndexes(SharedIndexSettings(url, retry_min_s=0.02, retry_max_s=0.2))


@pytest.fixture
async def pair(redis_server: RedisServer) -> AsyncIterator[tuple[RedisIndexes, RedisIndexes]]:
    a, b = provider(redis_server.url), provider(redis_server.url)
    a.index(NS)
    b.index(NS)
    await a.start()
    await b.start()
    await until(lambda: a.stats.up and b.stats.up, "both connected")
    yield a, b
    await a.stop()
    await b.stop()


async def test_what_one_process_records_the_other_sees(pair: tuple[RedisIndexes, RedisIndexes]) -> None:
    a, b = pair
    a.index(NS).add("pod-1:8000", [11, 12, 13], capacity=100)
    assert a.index(NS).longest_prefix([11, 12, 13]) == {"pod-1:8000": 3}  # own view at once
    await until(lambda: b.index(NS).longest_prefix([11, 12, 13]) == {"pod-1:8000": 3}, "b learns")
    b.index(NS).add("pod-2:8000", [11], capacity=100)
    await until(lambda: a.index(NS).holders(11) == {"pod-1:8000", "pod-2:8000"}, "a learns")
    a.index(NS).remove_endpoint("pod-1:8000")
    await until(lambda: b.index(NS).holders(12) is None, "b forgets the removed endpoint")
    assert b.index(NS).holders(11) == {"pod-2:8000"}
    assert a.stats.applied >= 1 and b.stats.applied >= 2


async def test_string_keys_and_the_capacity_hold_in_both_views_and_in_redis(
    pair: tuple[RedisIndexes, RedisIndexes], redis_server: RedisServer
) -> None:
    a, b = pair
    a.index(NS).add("e:1", ["img-a", "img-b", "img-c"], capacity=2)
    await until(lambda: b.index(NS).size("e:1") == 2, "b holds the two most recent")
    assert b.index(NS).holds("e:1", "img-c") and not b.index(NS).holds("e:1", "img-a")
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.zcard(f"mmgate:{NS}:ep:e:1") == 2  # Redis is trimmed to the capacity too
    finally:
        client.close()


async def test_a_late_joiner_starts_from_the_snapshot(redis_server: RedisServer) -> None:
    a = provider(redis_server.url)
    a.index(NS).add("pod-1:8000", [1, 2], capacity=10)  # queued before Redis was even reached
    await a.start()
    await until(lambda: a.pending == 0 and a.stats.written == 1, "a wrote its change")
    c = provider(redis_server.url)
    c.index(NS)
    await c.start()
    try:
        await until(lambda: c.index(NS).longest_prefix([1, 2]) == {"pod-1:8000": 2}, "c loads it")
        assert c.stats.applied == 0  # from the snapshot, not from the stream
    finally:
        await a.stop()
        await c.stop()


async def test_redis_going_away_keeps_the_local_view_and_recovers(redis_server: RedisServer) -> None:
    a, b = provider(redis_server.url), provider(redis_server.url)
    a.index(NS)
    b.index(NS)
    await a.start()
    await b.start()
    try:
        await until(lambda: a.stats.up and b.stats.up, "both connected")
        redis_server.kill()
        a.index(NS).add("pod-1:8000", [7, 8], capacity=10)
        await until(lambda: not a.stats.up and not b.stats.up, "both notice")
        assert a.index(NS).longest_prefix([7, 8]) == {"pod-1:8000": 2}  # routing goes on locally
        assert b.index(NS).holders(7) is None
        redis_server.start()  # an empty Redis on the same port, as after a restart
        await until(lambda: a.stats.up and b.stats.up, "both reconnect")
        await until(lambda: b.index(NS).longest_prefix([7, 8]) == {"pod-1:8000": 2}, "queued change lands")
        b.index(NS).add("pod-2:8000", [9], capacity=10)
        await until(lambda: a.index(NS).holders(9) == {"pod-2:8000"}, "sharing resumes")
        assert a.stats.failures >= 1 and a.stats.resyncs >= 2 and a.stats.dropped == 0
    finally:
        await a.stop()
        await b.stop()


async def test_a_frozen_redis_never_blocks_the_local_view_and_its_changes_land_after(
    pair: tuple[RedisIndexes, RedisIndexes], redis_server: RedisServer
) -> None:
    """A hung Redis (stopped, connections open) is worse than a dead one for anything that waits:
    the index methods the scheduler calls are synchronous and answer from the local view."""
    a, b = pair
    a.index(NS).add("pod-1:8000", [1], capacity=100)
    await until(lambda: b.index(NS).holders(1) == {"pod-1:8000"}, "b learns before the freeze")
    writes = a.stats.round_trips["write"]
    redis_server.freeze()
    try:
        for key in range(2, 40):
            a.index(NS).add("pod-1:8000", [key], capacity=100)
            assert a.index(NS).longest_prefix([1, key]) == {"pod-1:8000": 2}  # at once, locally
            await asyncio.sleep(0)  # let the writer start its (stuck) pipeline
        assert a.pending >= 1  # queued behind the write Redis does not answer
        assert b.index(NS).holders(39) is None
    finally:
        redis_server.thaw()
    await until(lambda: b.index(NS).holders(39) == {"pod-1:8000"}, "the queued changes land")
    assert a.pending == 0 and a.stats.dropped == 0
    # 38 changes went in far fewer pipelined writes than changes (batches of up to 512)
    assert 1 <= a.stats.round_trips["write"] - writes < 38
    assert b.stats.round_trips["tail"] >= 1 and b.stats.round_trips["resync"] >= 1


async def test_a_full_outbox_drops_the_oldest_changes_and_counts_them() -> None:
    idx = RedisIndexes(SharedIndexSettings("redis://127.0.0.1:1/0", outbox_limit=2))
    ns = idx.index(NS)
    for key in range(5):
        ns.add("e:1", [key], capacity=10)
    assert idx.pending == 2 and idx.stats.dropped == 3
    assert ns.longest_prefix([0]) == {"e:1": 1}  # the local view keeps everything


async def test_hostile_stream_entries_are_refused_and_the_tail_keeps_going(
    pair: tuple[RedisIndexes, RedisIndexes], redis_server: RedisServer
) -> None:
    """Entries another writer put in the stream with broken fields: each is skipped and counted,
    and the next good change still reaches the view (before, the first one ended the tail)."""
    a, _ = pair
    client = redis.Redis.from_url(redis_server.url)
    stream = f"mmgate:{NS}:log"
    hostile: list[dict[str, bytes | str | int]] = [
        {"o": "x", "op": "a", "e": "pod:1", "k": b"\xc1"},  # not msgpack
        {"o": "x", "op": "a", "e": "pod:1", "k": b"\x91\x91\x01"},  # a key that is a list: unhashable
        {"o": "x", "op": "a", "e": "pod:1", "k": b"\x05"},  # not a list of keys
        {"o": "x", "op": "a", "e": b"\xff\xfe", "k": b"\x91\x01"},  # endpoint not UTF-8
        {"o": "x", "op": "a", "e": "p" * 1000, "k": b"\x91\x01"},  # endpoint name too long
        {"o": "x", "op": "a", "e": "pod:1", "k": b"\x91\x01", "c": "many"},  # capacity not a number
        {"o": "x", "op": "a", "e": "pod:1", "k": b"\x91\x01", "c": -1},
        {"o": "x", "op": "?", "e": "pod:1", "k": b"\x91\x01"},  # unknown operation
        {"o": "x", "op": "a", "e": "pod:1", "k": b"\x91" * 100_000 + b"\x01"},  # nested 100,000 deep
    ]
    try:
        for fields in hostile:
            client.xadd(stream, fields)  # type: ignore[arg-type]
        client.xadd(stream, {"o": "x", "op": "a", "e": "pod:1", "k": b"\x92\x07\x08"})  # good: [7, 8]
        await until(lambda: a.index(NS).longest_prefix([7, 8]) == {"pod:1": 2}, "the good entry applied")
        assert a.stats.refused == len(hostile) and a.stats.up
        assert a.index(NS).endpoints() == ["pod:1"]
    finally:
        client.close()
