"""KV-event wire: decoding what every vLLM generation sends (payloads built here with plain msgpack,
as vLLM's encoder lays them out), encoding, and the replay framing."""

from __future__ import annotations

import msgspec
import pytest

from mmgate.vllm.kvevents import (
    END_SEQ,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    LegacyBlockRemoved,
    LegacyBlockStored,
    WireFormat,
    decode_batch,
    decode_seq,
    encode_batch,
    encode_seq,
    parse_replay_reply,
    replay_end,
    replay_reply,
    wire_hash,
)

STORED_MAP = {
    "type": "BlockStored",
    "block_hashes": [11, 12],
    "parent_block_hash": None,
    "token_ids": list(range(32)),
    "block_size": 16,
    "lora_id": None,
    "medium": "GPU",
    "lora_name": None,
    "extra_keys": [[["img-1", 3]], None],
}


def test_current_generation_maps_in_an_array_envelope() -> None:
    removed = {"type": "BlockRemoved", "block_hashes": [12], "medium": "CPU"}
    payload = msgspec.msgpack.encode([2.5, [STORED_MAP, removed, {"type": "AllBlocksCleared"}], 3])
    batch = decode_batch(payload)
    assert (batch.ts, batch.data_parallel_rank) == (2.5, 3)
    stored, gone, cleared = batch.events
    assert stored == BlockStored(
        [11, 12], None, list(range(32)), 16, None, "GPU", None, [[["img-1", 3]], None]
    )
    assert gone == BlockRemoved([12], "CPU")
    assert cleared == AllBlocksCleared()


def test_unknown_newer_fields_are_ignored_and_group_idx_is_kept() -> None:
    newer = {**STORED_MAP, "group_idx": 1, "kv_cache_spec_kind": "full", "session_id": "s"}
    (stored,) = decode_batch(msgspec.msgpack.encode([1.0, [newer]])).events
    assert isinstance(stored, BlockStored)
    assert stored.group_idx == 1 and stored.block_hashes == [11, 12]


def test_a_map_envelope_decodes_too() -> None:
    payload = msgspec.msgpack.encode({"ts": 1.0, "events": [STORED_MAP], "data_parallel_rank": 0})
    batch = decode_batch(payload)
    assert batch.data_parallel_rank == 0
    assert isinstance(batch.events[0], BlockStored)


def test_legacy_tagged_arrays_become_current_structs() -> None:
    digest = bytes(range(32))
    events = [
        ["BlockStored", [digest], None, [7] * 16, 16, None],
        ["BlockStored", [5], 4, [1] * 16, 16, 2, "GPU"],  # a later array generation appended medium
        ["BlockRemoved", [5]],
        ["AllBlocksCleared"],
    ]
    batch = decode_batch(msgspec.msgpack.encode([9.0, events]))
    assert batch.ts == 9.0 and batch.data_parallel_rank is None
    first, second, removed, cleared = batch.events
    assert first == BlockStored([digest], None, [7] * 16, 16, None, None, None)
    assert second == BlockStored([5], 4, [1] * 16, 16, 2, None, None)
    assert removed == BlockRemoved([5], None)
    assert cleared == AllBlocksCleared()


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xc1", msgspec.msgpack.encode([1.0, [{"type": "Nope"}]]), msgspec.msgpack.encode("x")],
)
def test_anything_else_is_a_decode_error(payload: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_batch(payload)


def test_encodings_round_trip_through_the_decoder() -> None:
    current = encode_batch(
        [BlockStored([1], None, [0] * 16, 16, None, "GPU", None), BlockRemoved([1], "GPU")],
        WireFormat.CURRENT,
        ts=4.0,
        data_parallel_rank=2,
    )
    assert msgspec.msgpack.decode(current)[2] == 2
    assert decode_batch(current).events == [
        BlockStored([1], None, [0] * 16, 16, None, "GPU", None),
        BlockRemoved([1], "GPU"),
    ]
    legacy = encode_batch(
        [LegacyBlockStored([1], None, [0] * 16, 16, None), LegacyBlockRemoved([1])], WireFormat.LEGACY, ts=4.0
    )
    assert msgspec.msgpack.decode(legacy) == [
        4.0,
        [["BlockStored", [1], None, [0] * 16, 16, None], ["BlockRemoved", [1]]],
    ]
    assert decode_batch(legacy).events == [
        BlockStored([1], None, [0] * 16, 16, None, None, None),
        BlockRemoved([1], None),
    ]


def test_wire_hash_is_the_digests_last_8_bytes_by_default() -> None:
    digest = bytes(range(32))
    assert wire_hash(digest) == int.from_bytes(digest[-8:], "big")
    assert wire_hash(digest, as_int=False) == digest
    assert wire_hash(123) == 123


@pytest.mark.parametrize("fmt", list(WireFormat))
def test_replay_framing_round_trips(fmt: WireFormat) -> None:
    reply = replay_reply(fmt, b"kv", 7, b"payload")
    assert len(reply) == (2 if fmt is WireFormat.LEGACY else 3)
    assert parse_replay_reply(reply) == (7, b"payload")
    assert parse_replay_reply(replay_end(fmt)) is None


def test_sequence_frames_are_8_byte_big_endian() -> None:
    assert encode_seq(1) == b"\x00" * 7 + b"\x01"
    assert encode_seq(-1) == END_SEQ
    assert decode_seq(END_SEQ) == -1
    assert decode_seq(encode_seq(2**40)) == 2**40
    with pytest.raises(ValueError):
        parse_replay_reply([b"x"])
    with pytest.raises(ValueError):
        parse_replay_reply([b"abc", b"payload"])
