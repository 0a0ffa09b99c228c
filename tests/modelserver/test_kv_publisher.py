"""The KV-event publisher on real ZMQ sockets, decoded without our own structs.

``msgspec.msgpack.decode`` without a type gives plain lists/dicts: exactly what any vLLM subscriber
in another language sees on the wire.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import zmq
import zmq.asyncio

from mmgate.modelserver.events import AllBlocksCleared, BlockRemoved, BlockStored
from mmgate.modelserver.kv_publisher import KVEventPublisher
from mmgate.vllm.kv_events_config import parse_kv_events_config
from mmgate.vllm.kvevents import END_SEQ, WireFormat

DIGEST_A = bytes(range(32))
DIGEST_B = bytes(range(32, 64))


def _config(topic: str = "kv", replay: bool = True) -> str:
    replay_ep = ', "replay_endpoint": "tcp://127.0.0.1:*"' if replay else ""
    return (
        '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", '
        f'"topic": "{topic}", "buffer_steps": 4{replay_ep}}}'
    )


async def _subscribe(ctx: zmq.asyncio.Context, endpoint: str, topic: bytes) -> zmq.asyncio.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(endpoint)
    return sub


async def _recv_after_join(pub: KVEventPublisher, sub: zmq.asyncio.Socket, events: list) -> list[bytes]:
    """PUB drops messages until the subscription has propagated: publish until one arrives."""
    for _ in range(100):
        pub.publish(events, ts=1.5)
        try:
            return await asyncio.wait_for(sub.recv_multipart(), 0.05)
        except TimeoutError:
            continue
    raise AssertionError("no KV event batch arrived")


async def test_current_encoding_is_tagged_maps_without_defaults() -> None:
    cfg = parse_kv_events_config(_config(replay=False))
    pub = KVEventPublisher(cfg)
    ctx = zmq.asyncio.Context()
    sub = await _subscribe(ctx, pub.endpoint, b"kv")
    try:
        events = [
            BlockStored([DIGEST_A, DIGEST_B], None, list(range(32)), 16, [[("img-1", 3)], None]),
            BlockRemoved([DIGEST_A]),
            AllBlocksCleared(),
        ]
        topic, seq, payload = await _recv_after_join(pub, sub, events)
    finally:
        sub.close()
        await pub.close()
        ctx.term()
    assert topic == b"kv"
    assert len(seq) == 8
    batch = msgspec.msgpack.decode(payload)
    ts, wire, rank = batch
    assert ts == 1.5 and rank == 0
    stored, removed, cleared = wire
    assert stored == {
        "type": "BlockStored",
        "block_hashes": [int.from_bytes(DIGEST_A[-8:], "big"), int.from_bytes(DIGEST_B[-8:], "big")],
        "parent_block_hash": None,
        "token_ids": list(range(32)),
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [[["img-1", 3]], None],
    }
    assert removed == {
        "type": "BlockRemoved",
        "block_hashes": [int.from_bytes(DIGEST_A[-8:], "big")],
        "medium": "GPU",
    }
    assert cleared == {"type": "AllBlocksCleared"}


async def test_legacy_encoding_is_tagged_arrays() -> None:
    cfg = parse_kv_events_config(_config(replay=False))
    pub = KVEventPublisher(cfg, fmt=WireFormat.LEGACY, int_hashes=False)
    ctx = zmq.asyncio.Context()
    sub = await _subscribe(ctx, pub.endpoint, b"")
    try:
        _, _, payload = await _recv_after_join(
            pub, sub, [BlockStored([DIGEST_B], DIGEST_A, [7] * 16, 16, [None]), BlockRemoved([DIGEST_B])]
        )
    finally:
        sub.close()
        await pub.close()
        ctx.term()
    _ts, (stored, removed) = msgspec.msgpack.decode(payload)
    assert stored == ["BlockStored", [DIGEST_B], DIGEST_A, [7] * 16, 16, None]
    assert removed == ["BlockRemoved", [DIGEST_B]]


@pytest.mark.parametrize("fmt", list(WireFormat))
async def test_replay_returns_buffered_batches_then_end_marker(fmt: WireFormat) -> None:
    pub = KVEventPublisher(parse_kv_events_config(_config()), fmt=fmt)
    pub.start()
    for i in range(6):  # buffer_steps=4 keeps seq 2..5
        pub.publish([BlockRemoved([bytes([i]) * 8])], ts=float(i))
    ctx = zmq.asyncio.Context()
    req = ctx.socket(zmq.DEALER)
    req.setsockopt(zmq.LINGER, 0)
    assert pub.replay_endpoint is not None
    req.connect(pub.replay_endpoint)
    try:
        await req.send_multipart([b"", (3).to_bytes(8, "big")])
        frames = []
        while True:
            msg = await asyncio.wait_for(req.recv_multipart(), 2)
            assert msg[0] == b""  # the delimiter we sent comes back
            frames.append(msg[1:])
            if END_SEQ in msg:
                break
    finally:
        req.close()
        await pub.close()
        ctx.term()
    *batches, end = frames
    if fmt is WireFormat.CURRENT:
        assert end == [b"", END_SEQ, b""]
        assert [b[0] for b in batches] == [b"kv"] * 3
        batches = [b[1:] for b in batches]
    else:
        assert end == [END_SEQ, b""]
    assert [int.from_bytes(s, "big") for s, _ in batches] == [3, 4, 5]
    decoded = [msgspec.msgpack.decode(p) for _, p in batches]
    assert [d[0] for d in decoded] == [3.0, 4.0, 5.0]


async def test_endpoint_without_wildcard_connects_to_a_binding_subscriber() -> None:
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    cfg = parse_kv_events_config(f'{{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:{port}"}}')
    pub = KVEventPublisher(cfg)
    try:
        assert pub.endpoint == f"tcp://127.0.0.1:{port}"  # connected, not bound
        _topic, seq, payload = await _recv_after_join(pub, sub, [AllBlocksCleared()])
    finally:
        sub.close()
        await pub.close()
        ctx.term()
    assert msgspec.msgpack.decode(payload)[1] == [{"type": "AllBlocksCleared"}]
    assert int.from_bytes(seq, "big") >= 0
