"""A model server's KV-event publisher, as vLLM's ``ZmqEventPublisher`` behaves.

A ZMQ PUB socket that binds or connects by vLLM's rule (:func:`mmgate.vllm.kv_events_config.binds`)
and sends one multipart message per engine step; an optional replay ROUTER serves buffered batches.
The wire itself (structs, encodings, framing) is :mod:`mmgate.vllm.kvevents`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from mmgate.modelserver import events as engine_events
from mmgate.modelserver.events import KVEvent
from mmgate.vllm.kv_events_config import KVEventsConfig, binds, bound_endpoint
from mmgate.vllm.kvevents import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    LegacyAllBlocksCleared,
    LegacyBlockRemoved,
    LegacyBlockStored,
    WireFormat,
    decode_seq,
    encode_batch,
    encode_seq,
    replay_end,
    replay_reply,
    wire_hash,
)


def to_wire(event: KVEvent, fmt: WireFormat, *, int_hashes: bool = True) -> msgspec.Struct:
    """Encode one engine KV event as the chosen vLLM generation does."""
    if isinstance(event, engine_events.BlockStored):
        hashes = [wire_hash(h, as_int=int_hashes) for h in event.block_hashes]
        parent = event.parent_block_hash
        parent_out = None if parent is None else wire_hash(parent, as_int=int_hashes)
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
    if isinstance(event, engine_events.BlockRemoved):
        hashes = [wire_hash(h, as_int=int_hashes) for h in event.block_hashes]
        if fmt is WireFormat.LEGACY:
            return LegacyBlockRemoved(hashes)
        return BlockRemoved(hashes, event.medium)
    return LegacyAllBlocksCleared() if fmt is WireFormat.LEGACY else AllBlocksCleared()


def kv_topic(template: str, *, pod: str, host: str, port: int, model: str) -> str:
    """The KV-event topic: vLLM's as given, or (mmgate's extension) a template naming this server,
    e.g. ``kv@{host}:{port}@{model}`` as llm-d's simulator and indexer spell it."""
    if "{" not in template:
        return template
    try:
        return template.format(pod=pod, host=host, port=port, model=model)
    except (KeyError, IndexError, ValueError) as exc:
        known = "{pod} {host} {port} {model}"
        raise ValueError(f"kv_events topic {template!r}: unknown placeholder {exc}; use {known}") from None


class KVEventPublisher:
    """One server's PUB socket (+ optional replay ROUTER), driven from the event loop.

    ``publish`` encodes and sends without blocking (PUB drops beyond its high-water mark, as in
    vLLM); there is no background thread because a step produces few events (a simulated fleet
    runs 8 pods on one loop; the reference engine hands its steps' events to the loop). The replay
    socket is served by a task on the running loop.
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
            self.replay_endpoint = bound_endpoint(self._replay, config.replay_endpoint)

    @staticmethod
    def _attach(sock: zmq.asyncio.Socket, endpoint: str) -> str:
        if binds(endpoint):
            sock.bind(endpoint)
            return bound_endpoint(sock, endpoint)
        sock.connect(endpoint)
        return endpoint

    def start(self) -> None:
        """Serve replay requests on the running loop (no-op without a replay endpoint)."""
        if self._replay is not None and self._replay_task is None:
            self._replay_task = asyncio.get_running_loop().create_task(self._serve_replay())

    def publish(self, events: Sequence[KVEvent], ts: float | None = None) -> int:
        """Send one batch (one engine step's events); returns its sequence number."""
        stamp = time.time() if ts is None else ts
        wire = [to_wire(e, self.fmt, int_hashes=self.int_hashes) for e in events]
        payload = encode_batch(wire, self.fmt, stamp, self.data_parallel_rank)
        seq = self._seq
        self._seq += 1
        with contextlib.suppress(zmq.Again):
            self._pub.send_multipart((self._topic, encode_seq(seq), payload), flags=zmq.NOBLOCK)
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
            start = decode_seq(start_bytes)
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await sock.send_multipart([*envelope, *replay_reply(self.fmt, self._topic, seq, payload)])
            await sock.send_multipart([*envelope, *replay_end(self.fmt)])

    async def close(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
