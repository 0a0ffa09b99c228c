"""What a received KV-event batch must satisfy before any of it touches the index.

Every byte on the event socket is untrusted: in centralised mode (``kvEvents.bind``) anyone who
reaches the port can send, and a pod's publisher can be misconfigured. ``msgspec`` already
checked the types of the fields it decoded (a hash is an int or bytes, token ids are ints, a
64-bit msgpack int at most); this module checks what types cannot say: the data-parallel rank
lies in the configured range (it selects bits of the index's presence mask, so an unchecked rank
is either a crash on a negative shift or an arbitrarily wide integer), a block size is positive,
the token ids fit the blocks they describe, a raw-digest hash is no longer than a digest, and no
event names more blocks than a batch of its size could. A batch that fails is refused whole, with
the reason returned for the refusal counter.
"""

from __future__ import annotations

from enum import StrEnum

from mmgate.vllm.kvevents import BlockRemoved, BlockStored, KVEventBatch

MAX_DIGEST_BYTES = 64
"""The longest raw block digest accepted (SHA-256 is 32 bytes, XXH3-128 16; SHA-512 would be 64)."""

MAX_BLOCK_SIZE = 1 << 16
"""vLLM's block sizes are 1..256 tokens in practice; anything past this is not a block size."""


class Refusal(StrEnum):
    """Why a message was refused: the ``reason`` label of ``mmgate_kv_events_refused_total``."""

    FRAMING = "framing"  # not [topic, 8-byte seq, payload]
    TOPIC = "topic"  # a topic longer than any pod name needs
    SEQUENCE = "sequence"  # a negative sequence number (only the replay end marker is negative)
    DECODE = "decode"  # the payload is not a batch of any vLLM generation
    RANK = "rank"  # the data-parallel rank lies outside 0..dataParallelSize-1
    EVENT = "event"  # an event's fields contradict each other or exceed a bound
    PUBLISHERS = "publishers"  # a new publisher beyond maxPublishers
    ERROR = "error"  # an unexpected exception while handling the batch (a bug; logged)


def refusal_of(batch: KVEventBatch, data_parallel_size: int) -> Refusal | None:
    """None when ``batch`` may be applied; otherwise why not."""
    rank = batch.data_parallel_rank
    if rank is not None and not 0 <= rank < data_parallel_size:
        return Refusal.RANK
    for event in batch.events:
        if isinstance(event, BlockStored):
            n = len(event.block_hashes)
            if not 0 < event.block_size <= MAX_BLOCK_SIZE or len(event.token_ids) > n * event.block_size:
                return Refusal.EVENT
            if event.token_ids and min(event.token_ids) < 0:
                return Refusal.EVENT
            if event.extra_keys is not None and len(event.extra_keys) > n:
                return Refusal.EVENT
            if not _hashes_ok(event.block_hashes) or not _hash_ok(event.parent_block_hash):
                return Refusal.EVENT
        elif isinstance(event, BlockRemoved) and not _hashes_ok(event.block_hashes):
            return Refusal.EVENT
    return None


def _hash_ok(value: bytes | int | None) -> bool:
    return not isinstance(value, bytes) or len(value) <= MAX_DIGEST_BYTES


def _hashes_ok(values: list[bytes | int]) -> bool:
    return all(_hash_ok(v) for v in values)
