"""KV-cache events on the wire, exactly as vLLM publishes them.

A subscriber written for vLLM (llm-d's kv-cache indexer, mmgate's own datalayer) must not be able
to tell a simulated pod from a real one, so this module reproduces vLLM's publisher:

* ``--kv-events-config`` JSON with vLLM's field names and defaults (:class:`KVEventsConfig`);
* a ZMQ PUB socket that binds when the endpoint has ``*`` or ``::`` or is ``ipc://``/``inproc://``
  and connects otherwise, sending multipart ``[topic, seq (8 bytes, big-endian), msgpack batch]``;
* the batch ``[ts, events, data_parallel_rank]`` (``EventBatch`` is array-like; ``[ts, events]``
  in the legacy generation);
* events in the current encoding (tagged msgpack maps, defaults omitted) or, by option, the legacy
  one (tagged arrays ``["BlockStored", hashes, parent, token_ids, block_size, lora_id]``);
* a replay ROUTER: a client sends an 8-byte start sequence and receives every buffered batch with
  ``seq >= start`` followed by an end marker (sequence ``-1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from mmgate.kvhash import event_hash
from mmgate.sim import engine_types
from mmgate.sim.engine_types import KVEvent

END_SEQ = (-1).to_bytes(8, "big", signed=True)

BlockHash = int | bytes


class WireFormat(StrEnum):
    """Which vLLM generation's event encoding to speak."""

    CURRENT = "current"  # tagged maps, defaults omitted; replay replies [topic, seq, payload]
    LEGACY = "legacy"  # tagged arrays; replay replies [seq, payload]


class KVEventsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """vLLM's ``--kv-events-config`` (same field names, same defaults)."""

    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    # Accepted so vLLM's JSON can be pasted; never binds: vLLM bounds the batches waiting for its
    # publisher thread, and a simulated pod sends each step's batch inside the step (docs/sim.md).
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def active(self) -> bool:
        return self.enable_kv_cache_events and self.resolved_publisher == "zmq"

    @property
    def resolved_publisher(self) -> str:
        if self.publisher is not None:
            return self.publisher
        return "zmq" if self.enable_kv_cache_events else "null"


def parse_kv_events_config(text: str) -> KVEventsConfig:
    """Decode the JSON given to ``--kv-events-config``; a clear ``ValueError`` on mistakes."""
    try:
        config = msgspec.json.decode(text.encode(), type=KVEventsConfig)
    except msgspec.DecodeError as exc:
        raise ValueError(f"--kv-events-config: {exc}") from None
    if config.resolved_publisher not in ("null", "zmq"):
        raise ValueError(f"--kv-events-config: unknown publisher {config.publisher!r} (null or zmq)")
    if config.buffer_steps < 1 or config.hwm < 0:
        raise ValueError("--kv-events-config: buffer_steps must be >= 1 and hwm >= 0")
    return config


def offset_endpoint(endpoint: str, index: int) -> str:
    """The endpoint of the ``index``-th pod sharing one config, as vLLM offsets data-parallel ranks.

    TCP ports grow by ``index`` (a wildcard or 0 port stays as it is, the OS picks one); ``inproc``
    and ``ipc`` names get a ``_dp{index}`` suffix.
    """
    if index == 0:
        return endpoint
    if endpoint.startswith(("inproc://", "ipc://")):
        return f"{endpoint}_dp{index}"
    head, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or int(port) == 0:
        return endpoint
    return f"{head}:{int(port) + index}"


def binds(endpoint: str) -> bool:
    """vLLM's rule: bind wildcard and ipc/inproc endpoints, connect to everything else."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


# --- wire structs: the current encoding -------------------------------------------------------


class _Event(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    pass


class BlockStored(_Event):
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None


class BlockRemoved(_Event):
    block_hashes: list[BlockHash]
    medium: str | None


class AllBlocksCleared(_Event):
    pass


# --- wire structs: the legacy (array) encoding -------------------------------------------------


class _LegacyEvent(msgspec.Struct, tag=True, array_like=True, gc=False):
    pass


class LegacyBlockStored(_LegacyEvent, tag="BlockStored"):
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None


class LegacyBlockRemoved(_LegacyEvent, tag="BlockRemoved"):
    block_hashes: list[BlockHash]


class LegacyAllBlocksCleared(_LegacyEvent, tag="AllBlocksCleared"):
    pass


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class LegacyEventBatch(msgspec.Struct, array_like=True, gc=False):
    """The older envelope had no data-parallel rank: ``[ts, events]``."""

    ts: float
    events: list[Any]


def external_hash(value: BlockHash, *, as_int: bool = True) -> BlockHash:
    """What vLLM publishes for a block hash: with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`` (its
    default) the digest's last 8 bytes as an integer, otherwise the raw digest."""
    if isinstance(value, int) or not as_int:
        return value
    return event_hash(value)


def to_wire(event: KVEvent, fmt: WireFormat, *, int_hashes: bool = True) -> msgspec.Struct:
    """Encode one engine KV event as the chosen vLLM generation does."""
    if isinstance(event, engine_types.BlockStored):
        hashes = [external_hash(h, as_int=int_hashes) for h in event.block_hashes]
        parent = event.parent_block_hash
        parent_out = None if parent is None else external_hash(parent, as_int=int_hashes)
        if fmt is WireFormat.LEGACY:
            return LegacyBlockStored(
                hashes, parent_out, list(event.token_ids), event.block_size, event.lora_id
            )
        extra: list[Any] | None = list(event.extra_keys) if event.extra_keys else None
        if extra is not None and all(e is None for e in extra):
            extra = None
        return BlockStored(
            hashes,
            parent_out,
            list(event.token_ids),
            event.block_size,
            event.lora_id,
            event.medium,
            event.lora_name,
            extra,
        )
    if isinstance(event, engine_types.BlockRemoved):
        hashes = [external_hash(h, as_int=int_hashes) for h in event.block_hashes]
        if fmt is WireFormat.LEGACY:
            return LegacyBlockRemoved(hashes)
        return BlockRemoved(hashes, event.medium)
    return LegacyAllBlocksCleared() if fmt is WireFormat.LEGACY else AllBlocksCleared()


class KVEventPublisher:
    """One pod's PUB socket (+ optional replay ROUTER), driven from the event loop.

    ``publish`` encodes and sends without blocking (PUB drops beyond its high-water mark, as in
    vLLM); there is no background thread because a simulated step produces few events and 8 pods
    share one loop. The replay socket is served by a task on the running loop.
    """

    def __init__(
        self,
        config: KVEventsConfig,
        *,
        fmt: WireFormat = WireFormat.CURRENT,
        int_hashes: bool = True,
        data_parallel_rank: int = 0,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.config = config
        self.fmt = fmt
        self.int_hashes = int_hashes
        self.data_parallel_rank = data_parallel_rank
        self._ctx = context or zmq.asyncio.Context.instance()
        self._topic = config.topic.encode()
        self._encoder = msgspec.msgpack.Encoder()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._seq = 0
        self._replay_task: asyncio.Task[None] | None = None
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = self._attach(self._pub, config.endpoint)
        self._replay: zmq.asyncio.Socket | None = None
        self.replay_endpoint: str | None = None
        if config.replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.set_hwm(2 * (config.buffer_steps + 1))
            self._replay.bind(config.replay_endpoint)
            self.replay_endpoint = _last_endpoint(self._replay, config.replay_endpoint)

    @staticmethod
    def _attach(sock: zmq.asyncio.Socket, endpoint: str) -> str:
        if binds(endpoint):
            sock.bind(endpoint)
            return _last_endpoint(sock, endpoint)
        sock.connect(endpoint)
        return endpoint

    @property
    def next_seq(self) -> int:
        return self._seq

    def start(self) -> None:
        """Serve replay requests on the running loop (no-op without a replay endpoint)."""
        if self._replay is not None and self._replay_task is None:
            self._replay_task = asyncio.get_running_loop().create_task(self._serve_replay())

    def publish(self, events: Sequence[KVEvent], ts: float | None = None) -> int:
        """Send one batch (one engine step's events); returns its sequence number."""
        stamp = time.time() if ts is None else ts
        wire = [to_wire(e, self.fmt, int_hashes=self.int_hashes) for e in events]
        batch: msgspec.Struct
        if self.fmt is WireFormat.LEGACY:
            batch = LegacyEventBatch(stamp, wire)
        else:
            batch = EventBatch(stamp, wire, self.data_parallel_rank)
        payload = self._encoder.encode(batch)
        seq = self._seq
        self._seq += 1
        with contextlib.suppress(zmq.Again):
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
        self._buffer.append((seq, payload))
        return seq

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        sock = self._replay
        while True:
            frames = await sock.recv_multipart()
            # REQ clients add an empty delimiter frame; DEALER clients may not.
            if len(frames) == 3:
                client, _empty, start_bytes = frames
            elif len(frames) == 2:
                client, start_bytes = frames
            else:
                continue
            envelope = [client, b""] if len(frames) == 3 else [client]
            start = int.from_bytes(start_bytes, "big", signed=True)
            for seq, payload in list(self._buffer):
                if seq >= start:
                    body = [seq.to_bytes(8, "big"), payload]
                    if self.fmt is WireFormat.CURRENT:
                        body.insert(0, self._topic)
                    await sock.send_multipart([*envelope, *body])
            end = [b"", END_SEQ, b""] if self.fmt is WireFormat.CURRENT else [END_SEQ, b""]
            await sock.send_multipart([*envelope, *end])

    async def close(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)


def _last_endpoint(sock: zmq.asyncio.Socket, fallback: str) -> str:
    """The concrete endpoint after a bind (wildcard ports resolved), for printing and clients."""
    with contextlib.suppress(zmq.ZMQError):
        last = sock.getsockopt(zmq.LAST_ENDPOINT)
        if isinstance(last, bytes) and last:
            return last.decode()
    return fallback


def describe(config: KVEventsConfig) -> str:
    """The config as vLLM would print it (for logs and ``--help`` examples)."""
    return json.dumps(msgspec.to_builtins(config))
