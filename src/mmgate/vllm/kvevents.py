"""vLLM's KV-cache events on the wire: the structs, both encodings, and the ZMQ framing.

Both ends of mmgate speak this: the simulator publishes it (a subscriber written for vLLM must not
tell a simulated pod from a real one) and the datalayer consumes it from real and simulated pods.

* Messages are multipart ``[topic, seq, payload]``; ``seq`` is an 8-byte big-endian counter per
  publisher (from 0), the payload one msgpack batch ``[ts, events, data_parallel_rank]``.
* Events come in two encodings. Current vLLM (``KVCacheEvent`` with ``tag=True,
  omit_defaults=True``) sends each event as a msgpack map with ``"type": "BlockStored"`` and
  optional fields left out when they hold their default. Older vLLM (``array_like=True``) sent
  tagged arrays, ``["BlockStored", hashes, parent, token_ids, block_size, lora_id]``, in a batch
  without the rank (``[ts, events]``). :func:`decode_batch` reads every generation and returns the
  current structs.
* Block hashes are 64-bit integers by default (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``: the
  digest's last 8 bytes, :func:`mmgate.vllm.blocks.event_hash`) or the raw digest.
* Replay: a client sends an 8-byte start sequence to the replay ROUTER and receives every buffered
  batch with ``seq >= start`` (current: ``[topic, seq, payload]``; older: ``[seq, payload]``), then an
  end marker whose sequence is ``-1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Generic, TypeVar

import msgspec

from mmgate.vllm.blocks import BlockHash, event_hash

__all__ = [
    "END_SEQ",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "EventBatch",
    "KVCacheEvent",
    "KVEventBatch",
    "LegacyAllBlocksCleared",
    "LegacyBlockRemoved",
    "LegacyBlockStored",
    "LegacyEventBatch",
    "WireFormat",
    "decode_batch",
    "decode_seq",
    "encode_batch",
    "encode_seq",
    "parse_replay_reply",
    "replay_end",
    "replay_reply",
    "wire_hash",
]

END_SEQ = (-1).to_bytes(8, "big", signed=True)
"""The sequence of the replay end marker."""


class WireFormat(StrEnum):
    """Which vLLM generation's encoding to speak."""

    CURRENT = "current"  # tagged maps, defaults omitted; replay replies [topic, seq, payload]
    LEGACY = "legacy"  # tagged arrays; replay replies [seq, payload]


# --- the current encoding: tagged maps ----------------------------------------------------------


class _Event(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    pass


class BlockStored(_Event):
    """Blocks newly cached in one allocation. ``extra_keys`` has one entry per block (None for a
    block without), untagged: ``[identifier, offset]`` per media item, the LoRA name, the salt.
    ``lora_id``, ``medium`` and ``lora_name`` have no default in vLLM, so they are always sent."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None  # the KV-cache group (hybrid models); omitted when None


class BlockRemoved(_Event):
    """Evicted blocks (vLLM sends one event per evicted hash)."""

    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(_Event):
    """The pod's prefix cache was reset: forget everything it stored."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


# --- the legacy encoding: tagged arrays ---------------------------------------------------------


class _LegacyEvent(msgspec.Struct, tag=True, array_like=True, gc=False):
    pass


class LegacyBlockStored(_LegacyEvent, tag="BlockStored"):
    """Decoding ignores trailing elements later array generations appended (e.g. ``medium``)."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None


class LegacyBlockRemoved(_LegacyEvent, tag="BlockRemoved"):
    block_hashes: list[BlockHash]


class LegacyAllBlocksCleared(_LegacyEvent, tag="AllBlocksCleared"):
    pass


LegacyKVCacheEvent = LegacyBlockStored | LegacyBlockRemoved | LegacyAllBlocksCleared

_E = TypeVar("_E")


# --- batches ------------------------------------------------------------------------------------


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """The envelope to encode: ``[ts, events, data_parallel_rank]``."""

    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class LegacyEventBatch(msgspec.Struct, array_like=True, gc=False):
    """The older envelope had no data-parallel rank: ``[ts, events]``."""

    ts: float
    events: list[Any]


class KVEventBatch(msgspec.Struct, gc=False):
    """A decoded batch, whatever generation sent it (legacy events converted to current structs)."""

    ts: float
    events: list[KVCacheEvent]
    data_parallel_rank: int | None = None


class _ArrayBatch(msgspec.Struct, Generic[_E], array_like=True, gc=False):
    ts: float
    events: list[_E]
    data_parallel_rank: int | None = None


_ENCODER = msgspec.msgpack.Encoder()
_MAP_DECODER = msgspec.msgpack.Decoder(KVEventBatch)
_ARRAY_DECODER = msgspec.msgpack.Decoder(_ArrayBatch[KVCacheEvent])
_LEGACY_DECODER = msgspec.msgpack.Decoder(_ArrayBatch[LegacyKVCacheEvent])


def wire_hash(value: BlockHash, *, as_int: bool = True) -> BlockHash:
    """What vLLM publishes for a block key: with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`` (its
    default) the digest's last 8 bytes as an integer, otherwise the raw digest."""
    if isinstance(value, int) or not as_int:
        return value
    return event_hash(value)


def encode_batch(
    events: Sequence[msgspec.Struct], fmt: WireFormat, ts: float, data_parallel_rank: int = 0
) -> bytes:
    """One batch payload as the chosen generation frames it (events already in its encoding)."""
    batch: msgspec.Struct
    if fmt is WireFormat.LEGACY:
        batch = LegacyEventBatch(ts, list(events))
    else:
        batch = EventBatch(ts, list(events), data_parallel_rank)
    return _ENCODER.encode(batch)


def _is_msgpack_map(payload: bytes) -> bool:
    first = payload[0] if payload else 0
    return 0x80 <= first <= 0x8F or first in (0xDE, 0xDF)


def _from_legacy(event: LegacyKVCacheEvent) -> KVCacheEvent:
    if isinstance(event, LegacyBlockStored):
        return BlockStored(
            event.block_hashes,
            event.parent_block_hash,
            event.token_ids,
            event.block_size,
            event.lora_id,
            None,
            None,
        )
    if isinstance(event, LegacyBlockRemoved):
        return BlockRemoved(event.block_hashes, None)
    return AllBlocksCleared()


def decode_batch(payload: bytes) -> KVEventBatch:
    """Decode one batch payload of any vLLM generation; ``msgspec.DecodeError`` if it is none.

    The envelope may be an array (``[ts, events(, rank)]``) or a map (``{"ts", "events", ...}``,
    as ``EventBatch`` without ``array_like`` encodes); events may be maps or tagged arrays (a
    publisher uses one encoding, so the batch is decoded whole, current encoding first).
    """
    if _is_msgpack_map(payload):
        return _MAP_DECODER.decode(payload)
    try:
        batch = _ARRAY_DECODER.decode(payload)
    except msgspec.ValidationError:
        legacy = _LEGACY_DECODER.decode(payload)
        events = [_from_legacy(e) for e in legacy.events]
        return KVEventBatch(legacy.ts, events, legacy.data_parallel_rank)
    return KVEventBatch(batch.ts, batch.events, batch.data_parallel_rank)


def encode_seq(seq: int) -> bytes:
    """A message's sequence frame (8 bytes, big-endian)."""
    return seq.to_bytes(8, "big", signed=seq < 0)


def decode_seq(frame: bytes) -> int:
    """A sequence frame's number (the replay end marker is ``-1``)."""
    return int.from_bytes(frame, "big", signed=True)


def replay_reply(fmt: WireFormat, topic: bytes, seq: int, payload: bytes) -> list[bytes]:
    """One buffered batch as the replay socket sends it back (after the client's envelope)."""
    if fmt is WireFormat.LEGACY:
        return [encode_seq(seq), payload]
    return [topic, encode_seq(seq), payload]


def replay_end(fmt: WireFormat) -> list[bytes]:
    """The marker that ends a replay."""
    return [END_SEQ, b""] if fmt is WireFormat.LEGACY else [b"", END_SEQ, b""]


def parse_replay_reply(frames: Sequence[bytes]) -> tuple[int, bytes] | None:
    """``(seq, payload)`` of one replay reply of either generation (the REQ/DEALER envelope already
    stripped), or None for the end marker. ``ValueError`` for anything else."""
    if len(frames) == 3:
        seq_frame, payload = frames[1], frames[2]
    elif len(frames) == 2:
        seq_frame, payload = frames[0], frames[1]
    else:
        raise ValueError(f"a replay reply has 2 or 3 frames, got {len(frames)}")
    if len(seq_frame) != 8:
        raise ValueError("a replay reply's sequence frame is 8 bytes")
    seq = decode_seq(seq_frame)
    return None if seq == -1 else (seq, payload)
