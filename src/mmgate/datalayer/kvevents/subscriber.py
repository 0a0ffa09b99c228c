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
* **Any input costs at most its own batch.** Every byte on the socket is untrusted (in centralised
  mode anyone who reaches the port sends): each field is checked before use
  (:mod:`mmgate.datalayer.kvevents.validate`), a refused batch is counted by reason and changes no
  state, an unexpected exception is caught per batch, and what a sender can make the subscriber
  hold is bounded by configuration: message size (ZMQ's MAXMSGSIZE), sequence trackers (one per
  endpoint and rank, at most ``max_publishers``), blocks per endpoint, and the lost-batches count
  per gap (a jump beyond ``max_sequence_gap`` is a reset). Should a reader end anyway (its socket
  failed), :meth:`KVEventSubscriber.ingesting` turns false: readiness and a gauge report it.

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
from mmgate.datalayer.kvevents.validate import Refusal, refusal_of
from mmgate.vllm.kv_events_config import bound_endpoint, offset_endpoint
from mmgate.vllm.kvevents import KVEventBatch, decode_batch, decode_seq, encode_seq, parse_replay_reply

log = logging.getLogger("mmgate.datalayer")

MAX_TOPIC_BYTES = 1024
"""llm-d's ``kv@POD@MODEL`` needs a pod address and a model id; a longer topic is refused."""


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
    jumps: int = 0  # sequence numbers implausibly far ahead, treated as resets (not in ``missing``)


@dataclass(slots=True)
class _Publisher:
    """One (endpoint, rank) as the live stream identifies it."""

    endpoint: str
    rank: int
    replay: str | None
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    reconnected: bool = False  # the link dropped since the last batch: the pod may have restarted


_PublisherOf = Callable[[bytes, int | None], _Publisher | Refusal | None]
"""``(topic, rank in the batch) -> publisher`` (None: not from a known endpoint; a refusal: no
room for another publisher)."""


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
        self.unattributed = 0  # (centralised) messages from a pod no endpoint matches
        self.refused: dict[Refusal, int] = dict.fromkeys(Refusal, 0)
        self.readers_failed = 0  # reader tasks that ended other than by stop() or a removed endpoint
        self.bound: list[str] = []  # centralised mode: the concrete addresses bound
        self._ctx = context or zmq.asyncio.Context.instance()
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._central: list[asyncio.Task[None]] = []
        self._publishers: dict[tuple[str, int], _Publisher] = {}
        self._topics: dict[bytes, str] = {}  # centralised: topic -> endpoint, one topic per endpoint
        self._topic_of: dict[str, bytes] = {}
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
                task.add_done_callback(self._reader_ended)
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
        await asyncio.gather(*tasks, return_exceptions=True)  # a failed reader was logged already

    def _added(self, endpoint: Endpoint) -> None:
        if not self._started or self.settings.bind is not None or endpoint.name in self._tasks:
            return
        loop = asyncio.get_running_loop()
        tasks = self._tasks[endpoint.name] = []
        for source in sources_of(endpoint, self.settings):
            task = loop.create_task(self._read_source(source))
            task.add_done_callback(self._reader_ended)
            tasks.append(task)

    def _removed(self, endpoint: Endpoint) -> None:
        for task in self._tasks.pop(endpoint.name, []):
            task.cancel()
        for key in [k for k, p in self._publishers.items() if p.endpoint == endpoint.name]:
            del self._publishers[key]
        topic = self._topic_of.pop(endpoint.name, None)
        if topic is not None:
            del self._topics[topic]
        self.index.remove_endpoint(endpoint.name)
        self.stats.pop(endpoint.name, None)

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        self.readers_failed += 1
        log.error("kv events: a reader stopped; precise routing goes stale", exc_info=task.exception())

    def ingesting(self) -> bool:
        """Every reader of the current endpoints (or bound sockets) is still reading: false once
        one has failed, true again when discovery removes the endpoint whose reader failed."""
        tasks = [t for ts in self._tasks.values() for t in ts] + self._central
        return not any(t.done() and not t.cancelled() for t in tasks)

    def publisher_count(self) -> int:
        """Sequence trackers held (at most ``settings.max_publishers``)."""
        return len(self._publishers)

    # -- reading ---------------------------------------------------------------------------------

    def _sub_socket(self) -> zmq.asyncio.Socket:
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.settings.max_batch_bytes)
        sock.setsockopt(zmq.RCVHWM, self.settings.queue_size)
        sock.setsockopt(zmq.SUBSCRIBE, self.settings.topic_filter.encode())
        return sock

    async def _read_source(self, source: Source) -> None:
        sock = self._sub_socket()
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        watch = asyncio.get_running_loop().create_task(self._watch_disconnects(monitor, source))
        try:
            sock.connect(source.address)
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
            pub = self._publishers.get((source.endpoint, source.rank))
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
            try:
                await self._handle(frames, publisher_of)
            except Exception:  # a bug must cost one batch, not the reader (CancelledError passes)
                self._refuse(Refusal.ERROR)
                if self.refused[Refusal.ERROR].bit_count() == 1:  # log the 1st, 2nd, 4th, 8th, ...
                    log.warning("kv events: a batch raised; skipped", exc_info=True)
            handled += 1
            if handled >= per_tick:
                handled = 0
                await asyncio.sleep(0)  # let requests run between slices of a flood

    def _publisher(self, endpoint: str, rank: int, replay: str | None) -> _Publisher | Refusal:
        """The (endpoint, rank)'s tracker, made on first sight while there is room for it."""
        pub = self._publishers.get((endpoint, rank))
        if pub is None:
            if len(self._publishers) >= self.settings.max_publishers:
                return Refusal.PUBLISHERS
            pub = self._publishers[(endpoint, rank)] = _Publisher(endpoint, rank, replay)
        return pub

    def _source_publisher(self, source: Source, topic: bytes, rank: int | None) -> _Publisher | Refusal:
        return self._publisher(source.endpoint, source.rank, source.replay)

    def _central_publisher(
        self, topic: bytes, batch_rank: int | None, socket_rank: int
    ) -> _Publisher | Refusal | None:
        rank = socket_rank if batch_rank is None else batch_rank
        name = self._topics.get(topic)
        if name is None:
            pod = pod_of_topic(topic)
            endpoint = None if pod is None else self._endpoint_named(pod)
            if endpoint is None:
                return None
            name = endpoint.name
            # One remembered topic per endpoint: a sender cycling topics for a known pod holds one.
            old = self._topic_of.get(name)
            if old is not None:
                del self._topics[old]
            self._topics[topic] = name
            self._topic_of[name] = topic
        replay = None
        if self.settings.replay_port is not None:
            record = self.registry.get(name)
            if record is not None:
                replay = offset_endpoint(f"tcp://{record.endpoint.host}:{self.settings.replay_port}", rank)
        return self._publisher(name, rank, replay)

    def _endpoint_named(self, pod: str) -> Endpoint | None:
        record = self.registry.get(pod)
        if record is not None:
            return record.endpoint
        host = pod.rpartition(":")[0] if pod.count(":") == 1 else pod
        same_host = [r.endpoint for r in self.registry.records() if r.endpoint.host == host]
        return same_host[0] if len(same_host) == 1 else None

    def _refuse(self, why: Refusal) -> None:
        self.refused[why] += 1

    async def _handle(self, frames: list[bytes], publisher_of: _PublisherOf) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self._refuse(Refusal.FRAMING)
            return
        topic, seq_frame, payload = frames
        if len(topic) > MAX_TOPIC_BYTES:
            self._refuse(Refusal.TOPIC)
            return
        seq = decode_seq(seq_frame)
        if seq < 0:
            self._refuse(Refusal.SEQUENCE)
            return
        batch = _decoded(payload)
        if batch is not None:
            refusal = refusal_of(batch, self.settings.data_parallel_size)
            if refusal is not None:
                self._refuse(refusal)
                return
        pub = publisher_of(topic, None if batch is None else batch.data_parallel_rank)
        if pub is None:
            self.unattributed += 1
            return
        if isinstance(pub, Refusal):
            self._refuse(pub)
            return
        stats = self._stats(pub.endpoint)
        if pub.reconnected:
            pub.reconnected = False
            if pub.tracker.expected is not None:
                self._forget(pub, stats, "the connection to the publisher dropped")
        verdict = pub.tracker.classify(seq, self.settings.max_sequence_gap)
        if verdict is Verdict.DUPLICATE:
            stats.duplicates += 1
            return
        if verdict is Verdict.RESTART:
            self._forget(pub, stats, "the publisher restarted its sequence")
        elif verdict is Verdict.JUMP:
            stats.jumps += 1
            self._forget(pub, stats, "the sequence jumped further than any plausible loss")
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
            await self._replay(pub, stats, max(0, seq - self.settings.max_sequence_gap), seq, strict=False)
        if batch is None:
            self._refuse(Refusal.DECODE)
            stats.malformed += 1
            self._forget(pub, stats, "a batch could not be decoded")
            return
        self._apply(pub, stats, batch)
        pub.tracker.applied(seq)

    def _apply(self, pub: _Publisher, stats: EndpointEventStats, batch: KVEventBatch) -> None:
        if pub.endpoint not in self.registry:  # removed while its last batches were in flight
            return
        stats.batches += 1
        capacity = self.settings.max_blocks_per_endpoint
        stats.applied += apply_batch(self.index, pub.endpoint, pub.rank, batch, capacity)

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
        is a fine place to begin. The replay socket is trusted no more than the live one: each batch
        is checked, and a reply stream longer than the range asked for is cut off."""
        if pub.replay is None:
            return False
        stats.replays += 1
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(pub.replay)
        expected = start
        budget = upto - start + 64  # replies a well-behaved buffer sends, with room for a few extra
        try:
            await dealer.send_multipart([b"", encode_seq(start)])
            while True:
                budget -= 1
                if budget < 0:
                    raise ValueError("the replay sent more batches than were asked for")
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
                batch = decode_batch(payload)
                if refusal_of(batch, self.settings.data_parallel_size) is not None:
                    raise ValueError("the replay sent a batch that fails validation")
                self._apply(pub, stats, batch)
                expected = seq + 1
        except (TimeoutError, ValueError, RecursionError, msgspec.MsgspecError, zmq.ZMQError):
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


def _decoded(payload: bytes) -> KVEventBatch | None:
    """The batch, or None when the payload is no batch of any vLLM generation (msgspec raises
    DecodeError/ValidationError for malformed msgpack or wrong types; a deeply nested ``Any``
    field can raise RecursionError)."""
    try:
        return decode_batch(payload)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None


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
                ("sequence_jumps", "Sequence numbers too far ahead to be lost batches, treated as resets"),
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
                ("sequence_jumps", s.jumps),
            ):
                families[key].add_metric([name], value)
        for name in sub.index.endpoints():
            blocks.add_metric([name], sub.index.size(name))
        yield events
        yield from families.values()
        yield blocks
        yield CounterMetricFamily(
            "mmgate_kv_events_unattributed",
            "Messages from a pod no endpoint matches (centralised mode: the topic's POD)",
            value=sub.unattributed,
        )
        refused = CounterMetricFamily(
            "mmgate_kv_events_refused",
            "Messages refused before use, by reason (each costs only itself)",
            labels=["reason"],
        )
        for reason, count in sub.refused.items():
            refused.add_metric([reason.value], count)
        yield refused
        yield GaugeMetricFamily(
            "mmgate_kv_events_ingesting",
            "1 while every KV-event reader runs; 0 once one stopped (precise routing goes stale)",
            value=1 if sub.ingesting() else 0,
        )
        yield CounterMetricFamily(
            "mmgate_kv_events_readers_failed",
            "KV-event readers that ended on an error (their socket failed); see the error log",
            value=sub.readers_failed,
        )
        yield GaugeMetricFamily(
            "mmgate_kv_events_publishers",
            "Publishers (endpoint, rank) whose sequence is tracked; bounded by kvEvents.maxPublishers",
            value=sub.publisher_count(),
        )
