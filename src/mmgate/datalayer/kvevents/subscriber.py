"""The KV-event subscriber: one ZMQ SUB per endpoint (and rank), mirrored into a block index.

Per endpoint the subscriber keeps a socket, a task that reads it and a sequence tracker per
publisher; events are applied in the order the publisher numbered them, on the event loop but never
on the request path: the scheduler only reads the index. Guarantees, each with its metric:

* **A flood never delays requests.** The socket's receive queue is bounded (``queue_size`` batches,
  ZMQ's RCVHWM; beyond it ZMQ drops), and the reader yields to the loop after every
  ``batches_per_tick`` batches, so requests interleave with any amount of events.
* **Lost batches are noticed and repaired.** A sequence gap (queue overflow, late join, a dropped
  connection) counts the missing batches; with a replay socket the subscriber asks it (DEALER to
  vLLM's ROUTER) for everything from the first missing batch and applies it in order; without one,
  or when the replay cannot fill the gap, it forgets that rank's entries and relearns from the live
  stream (an index that claims blocks the pod evicted would misroute; one that forgot them only
  loses a hit until the pod stores them again). A batch numbered below the expected one, outside a
  replayed range, means the pod restarted: its entries are forgotten too. So does a dropped
  connection (ZMQ reconnects by itself; a socket monitor tells the subscriber it happened): the pod
  may have restarted, and its new sequence numbers could happen to continue the old ones, so the
  first batch after a reconnect is treated as a first join (forget, then catch up from the replay
  buffer).
* **Endpoints come and go with the registry.** An added endpoint gets its sockets; a removed one
  has them closed and its entries forgotten.

Centralised mode (llm-d): the subscriber binds ``bind`` (one socket per rank, ports offset as vLLM
offsets them), pods connect and name themselves in the topic ``kv@POD@MODEL``; POD is matched to an
endpoint by name (``host:port``), else by host when exactly one endpoint has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import msgspec
import zmq
import zmq.asyncio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mmgate.datalayer.endpoints import Endpoint, EndpointRegistry
from mmgate.datalayer.index.memory import AffinityIndex
from mmgate.datalayer.kvevents.apply import Applied, apply_batch, rank_mask
from mmgate.datalayer.kvevents.sequence import SequenceTracker, Verdict
from mmgate.datalayer.kvevents.settings import KVEventsSettings, Source, pod_of_topic, sources_of
from mmgate.vllm.kv_events_config import bound_endpoint, offset_endpoint
from mmgate.vllm.kvevents import KVEventBatch, decode_batch, decode_seq, encode_seq, parse_replay_reply

log = logging.getLogger("mmgate.datalayer")


@dataclass(slots=True)
class EndpointEventStats:
    """What happened to one endpoint's events (plain counters, read at scrape time)."""

    batches: int = 0
    applied: Applied = field(default_factory=Applied)
    gaps: int = 0
    missing: int = 0  # batches lost in gaps (dropped by a full queue, or never received)
    duplicates: int = 0
    replays: int = 0
    replay_failures: int = 0
    resyncs: int = 0  # entries forgotten to relearn (gap without replay, restart, bad batch)
    malformed: int = 0


@dataclass(slots=True)
class _Publisher:
    """One (endpoint, rank) as the live stream identifies it."""

    endpoint: str
    rank: int
    replay: str | None
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    reconnected: bool = False  # the link dropped since the last batch: the pod may have restarted


_PublisherOf = Callable[[bytes, int | None], _Publisher | None]
"""``(topic, rank in the batch) -> publisher`` (None: not from a known endpoint)."""


class KVEventSubscriber:
    def __init__(
        self,
        registry: EndpointRegistry,
        settings: KVEventsSettings,
        index: AffinityIndex[Hashable] | None = None,
        *,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.index: AffinityIndex[Hashable] = index if index is not None else AffinityIndex()
        self.stats: dict[str, EndpointEventStats] = {}
        self.unattributed = 0  # messages badly framed, or (centralised) from a pod no endpoint matches
        self.bound: list[str] = []  # centralised mode: the concrete addresses bound
        self._ctx = context or zmq.asyncio.Context.instance()
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._central: list[asyncio.Task[None]] = []
        self._publishers: dict[tuple[bytes, int], _Publisher] = {}
        self._started = False
        registry.on_add(self._added)
        registry.on_remove(self._removed)

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._started = True
        if self.settings.bind is not None:
            for rank in range(self.settings.data_parallel_size):
                sock = self._sub_socket()
                address = offset_endpoint(self.settings.bind, rank)
                sock.bind(address)
                self.bound.append(bound_endpoint(sock, address))
                task = asyncio.get_running_loop().create_task(self._read_central(sock, rank))
                self._central.append(task)
        else:
            for record in self.registry.records():
                self._added(record.endpoint)

    async def stop(self) -> None:
        self._started = False
        tasks = [t for ts in self._tasks.values() for t in ts] + self._central
        self._tasks.clear()
        self._central.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _added(self, endpoint: Endpoint) -> None:
        if not self._started or self.settings.bind is not None or endpoint.name in self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks[endpoint.name] = [
            loop.create_task(self._read_source(source)) for source in sources_of(endpoint, self.settings)
        ]

    def _removed(self, endpoint: Endpoint) -> None:
        for task in self._tasks.pop(endpoint.name, []):
            task.cancel()
        for key in [k for k, p in self._publishers.items() if p.endpoint == endpoint.name]:
            del self._publishers[key]
        self.index.remove_endpoint(endpoint.name)
        self.stats.pop(endpoint.name, None)

    # -- reading ---------------------------------------------------------------------------------

    def _sub_socket(self) -> zmq.asyncio.Socket:
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, self.settings.queue_size)
        sock.setsockopt(zmq.SUBSCRIBE, self.settings.topic_filter.encode())
        return sock

    async def _read_source(self, source: Source) -> None:
        sock = self._sub_socket()
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sock.connect(source.address)
        watch = asyncio.get_running_loop().create_task(self._watch_disconnects(monitor, source))
        try:
            await self._read(sock, lambda topic, rank: self._source_publisher(source, topic, rank))
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=0)

    async def _watch_disconnects(self, monitor: zmq.asyncio.Socket, source: Source) -> None:
        while True:
            await monitor.recv_multipart()  # only EVENT_DISCONNECTED is subscribed
            pub = self._publishers.get((source.address.encode(), source.rank))
            if pub is not None:
                pub.reconnected = True

    async def _read_central(self, sock: zmq.asyncio.Socket, rank: int) -> None:
        try:
            await self._read(sock, lambda topic, batch_rank: self._central_publisher(topic, batch_rank, rank))
        finally:
            sock.close(linger=0)

    async def _read(self, sock: zmq.asyncio.Socket, publisher_of: _PublisherOf) -> None:
        per_tick = self.settings.batches_per_tick
        handled = 0
        while True:
            frames = await sock.recv_multipart()
            await self._handle(frames, publisher_of)
            handled += 1
            if handled >= per_tick:
                handled = 0
                await asyncio.sleep(0)  # let requests run between slices of a flood

    def _source_publisher(self, source: Source, topic: bytes, rank: int | None) -> _Publisher:
        key = (source.address.encode(), source.rank)
        pub = self._publishers.get(key)
        if pub is None:
            pub = self._publishers[key] = _Publisher(source.endpoint, source.rank, source.replay)
        return pub

    def _central_publisher(self, topic: bytes, batch_rank: int | None, socket_rank: int) -> _Publisher | None:
        rank = socket_rank if batch_rank is None else batch_rank
        key = (topic, rank)
        pub = self._publishers.get(key)
        if pub is not None:
            return pub
        pod = pod_of_topic(topic)
        endpoint = None if pod is None else self._endpoint_named(pod)
        if endpoint is None:
            return None
        replay = None
        if self.settings.replay_port is not None:
            replay = offset_endpoint(f"tcp://{endpoint.host}:{self.settings.replay_port}", rank)
        pub = self._publishers[key] = _Publisher(endpoint.name, rank, replay)
        return pub

    def _endpoint_named(self, pod: str) -> Endpoint | None:
        record = self.registry.get(pod)
        if record is not None:
            return record.endpoint
        host = pod.rpartition(":")[0] if pod.count(":") == 1 else pod
        same_host = [r.endpoint for r in self.registry.records() if r.endpoint.host == host]
        return same_host[0] if len(same_host) == 1 else None

    async def _handle(self, frames: list[bytes], publisher_of: _PublisherOf) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self.unattributed += 1
            return
        topic, seq_frame, payload = frames
        seq = decode_seq(seq_frame)
        try:
            batch: KVEventBatch | None = decode_batch(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            batch = None
        pub = publisher_of(topic, None if batch is None else batch.data_parallel_rank)
        if pub is None:
            self.unattributed += 1
            return
        stats = self._stats(pub.endpoint)
        if pub.reconnected:
            pub.reconnected = False
            if pub.tracker.expected is not None:
                self._forget(pub, stats, "the connection to the publisher dropped")
        verdict = pub.tracker.classify(seq)
        if verdict is Verdict.DUPLICATE:
            stats.duplicates += 1
            return
        if verdict is Verdict.RESTART:
            self._forget(pub, stats, "the publisher restarted its sequence")
        elif verdict is Verdict.GAP:
            stats.gaps += 1
            stats.missing += pub.tracker.missing(seq)
            start = pub.tracker.expected or 0
            if not await self._replay(pub, stats, start, seq, strict=True):
                self._forget(pub, stats, "batches were lost and no replay filled the gap")
            if pub.tracker.classify(seq) is Verdict.DUPLICATE:
                stats.duplicates += 1
                return
        elif verdict is Verdict.FIRST and seq > 0 and pub.replay is not None:
            # Joining a pod that has been publishing: learn what its replay buffer still holds.
            await self._replay(pub, stats, 0, seq, strict=False)
        if batch is None:
            stats.malformed += 1
            self._forget(pub, stats, "a batch could not be decoded")
            return
        self._apply(pub, stats, batch)
        pub.tracker.applied(seq)

    def _apply(self, pub: _Publisher, stats: EndpointEventStats, batch: KVEventBatch) -> None:
        if pub.endpoint not in self.registry:  # removed while its last batches were in flight
            return
        stats.batches += 1
        stats.applied += apply_batch(self.index, pub.endpoint, pub.rank, batch)

    def _forget(self, pub: _Publisher, stats: EndpointEventStats, why: str) -> None:
        self.index.clear(pub.endpoint, rank_mask(pub.rank))
        stats.resyncs += 1
        pub.tracker = SequenceTracker()
        log.info(
            "kv events: forgetting an endpoint's blocks to relearn them",
            extra={"fields": {"endpoint": pub.endpoint, "rank": pub.rank, "reason": why}},
        )

    async def _replay(
        self, pub: _Publisher, stats: EndpointEventStats, start: int, upto: int, *, strict: bool
    ) -> bool:
        """Ask the publisher's replay socket for batches ``start..``; apply those before ``upto``.
        True when the range ``start..upto-1`` was delivered without a hole. Not ``strict`` (a
        first join): history older than the buffer is simply unknown, so the buffer's oldest batch
        is a fine place to begin."""
        if pub.replay is None:
            return False
        stats.replays += 1
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(pub.replay)
        expected = start
        try:
            await dealer.send_multipart([b"", encode_seq(start)])
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), self.settings.replay_timeout_s)
                reply = parse_replay_reply(frames[1:] if frames and frames[0] == b"" else frames)
                if reply is None:
                    break
                seq, payload = reply
                if seq < expected or seq >= upto:
                    continue
                if seq > expected:
                    if strict or expected > start:
                        raise ValueError("the replay buffer no longer holds the missing batches")
                    start = expected = seq
                self._apply(pub, stats, decode_batch(payload))
                expected = seq + 1
        except (TimeoutError, ValueError, msgspec.DecodeError, msgspec.ValidationError, zmq.ZMQError):
            stats.replay_failures += 1
            if expected > start:
                pub.tracker.mark_replayed(start, expected - 1)
            return False
        finally:
            dealer.close(linger=0)
        if expected > start:
            pub.tracker.mark_replayed(start, expected - 1)
        if expected < upto:
            stats.replay_failures += 1
            return False
        return True

    def _stats(self, endpoint: str) -> EndpointEventStats:
        stats = self.stats.get(endpoint)
        if stats is None:
            stats = self.stats[endpoint] = EndpointEventStats()
        return stats

    def collector(self) -> Collector:
        return KVEventsCollector(self)


class KVEventsCollector(Collector):
    """``mmgate_kv_events_*`` per endpoint, and the block index size."""

    def __init__(self, subscriber: KVEventSubscriber) -> None:
        self.subscriber = subscriber

    def collect(self) -> Iterator[Metric]:
        events = CounterMetricFamily(
            "mmgate_kv_events_applied", "KV events applied to the block index", labels=["endpoint", "type"]
        )
        families = {
            name: CounterMetricFamily(f"mmgate_kv_events_{name}", text, labels=["endpoint"])
            for name, text in (
                ("batches", "Event batches applied"),
                ("gaps", "Sequence gaps detected"),
                ("dropped_batches", "Batches lost in sequence gaps (full queue, late join, lost link)"),
                ("replays", "Replays requested after a gap"),
                ("replay_failures", "Replays that could not fill the gap"),
                ("resyncs", "Times an endpoint's entries were forgotten to relearn them"),
                ("malformed", "Batches that could not be decoded"),
            )
        }
        blocks = GaugeMetricFamily(
            "mmgate_kv_index_blocks", "Blocks the KV-event index holds per endpoint", labels=["endpoint"]
        )
        sub = self.subscriber
        for name, s in sub.stats.items():
            events.add_metric([name, "BlockStored"], s.applied.stored)
            events.add_metric([name, "BlockRemoved"], s.applied.removed)
            events.add_metric([name, "AllBlocksCleared"], s.applied.cleared)
            for key, value in (
                ("batches", s.batches),
                ("gaps", s.gaps),
                ("dropped_batches", s.missing),
                ("replays", s.replays),
                ("replay_failures", s.replay_failures),
                ("resyncs", s.resyncs),
                ("malformed", s.malformed),
            ):
                families[key].add_metric([name], value)
        for name in sub.index.endpoints():
            blocks.add_metric([name], sub.index.size(name))
        yield events
        yield from families.values()
        yield blocks
        yield CounterMetricFamily(
            "mmgate_kv_events_unattributed",
            "Messages no endpoint could be named for (unknown pod in the topic, bad framing)",
            value=sub.unattributed,
        )
