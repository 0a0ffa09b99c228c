"""The KV-cache events a model server's engine produces, before they are put on the wire.

vLLM's engine reports each change to its prefix cache (blocks stored, blocks evicted, the cache
reset) and its ``ZmqEventPublisher`` encodes them; the simulator's core and the reference engine
produce these values alike and :mod:`mmgate.modelserver.kv_publisher` encodes them as the chosen
vLLM generation does (the wire structs are :mod:`mmgate.vllm.kvevents`). Hashes stay raw digests
here so the encoding, not the engine, decides their wire form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmgate.vllm.blocks import BlockHash

__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "KVEvent"]


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks newly cached in one allocation (vLLM's ``BlockStored``). Hashes are raw digests;
    convert with :func:`mmgate.vllm.blocks.event_hash` for the default int wire form. ``extra_keys``
    has one entry per block in vLLM's untagged event form (or None for a block without)."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    extra_keys: list[list[Any] | None]
    medium: str = "GPU"
    lora_id: int | None = None
    lora_name: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """A cached block evicted (one event per evicted hash, as vLLM emits them)."""

    block_hashes: list[BlockHash]
    medium: str = "GPU"


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The prefix cache was reset."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared
