"""Affinity indexes shared through Redis by several gateway processes (replicas, ``--workers N``).

The scheduler is synchronous and must never wait on the network, so each process keeps a complete
local view (an :class:`~mmgate.datalayer.index.memory.AffinityIndex` per namespace) and Redis only
carries changes between views:

* **Writes are behind.** A local change is applied to the local view at once (this process sees its
  own decisions immediately) and queued in a bounded outbox; a background task sends the queue in
  pipelined batches: the per-endpoint sorted set ``PREFIX:NS:ep:ENDPOINT`` (member = the msgpack
  key, score = when it was added, trimmed to the endpoint's capacity), the endpoint set
  ``PREFIX:NS:eps``, and one entry per change in the stream ``PREFIX:NS:log`` (approximately capped).
* **Reads are local; others' changes are tailed.** A second connection blocks on ``XREAD`` over every
  namespace's stream and applies the entries other processes wrote (its own are skipped by origin).
* **Resync on every (re)connect.** The process notes the stream's last id, merges the sorted sets
  into its local view, writes its local view back (so a Redis restarted empty is repopulated), then
  tails from the noted id. Changes are idempotent (add, remove, forget an endpoint), so an overlap
  between snapshot and stream is harmless.

Consistency: eventual. A change reaches the other processes after one write batch and one ``XREAD``
round-trip (typically well under a millisecond on a LAN, more under load); two requests racing in
that window may both be routed cold. Per-endpoint LRU order can differ slightly between views. When
Redis is unreachable each process keeps routing on its local view (no request ever waits on Redis),
queues up to ``outbox_limit`` changes (older ones are dropped and counted), reports
``mmgate_shared_index_up 0`` and a warning log, and reconnects with backoff; on return it flushes
the queue and resyncs. Only presence is shared (mask bit 1): the KV-event index, whose entries carry
per-tier and per-rank bits, is fed separately in every process from the pods themselves.

What comes back from Redis is checked before use, as anything read off the network: another writer
(a different version, a stray client, a corrupted snapshot) can put any bytes in the stream or the
sorted sets. An entry whose endpoint is not UTF-8 or longer than :data:`MAX_ENDPOINT_BYTES`, whose
keys are not a msgpack list of ints, strings or bytes (the only key types the indexes use;
anything else would not even hash), or whose capacity is not a non-negative integer is skipped and
counted (``mmgate_shared_index_changes{result="refused"}``); it never stops the tail, and a capacity
never raises an endpoint's bound past :data:`MAX_CAPACITY`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import redis.asyncio as aioredis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from mmgate.datalayer.index.memory import ALL, PRESENT, AffinityIndex
from mmgate.datalayer.index.store import AffinityStore

log = logging.getLogger("mmgate.datalayer")

_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.decode

ADD, REMOVE, FORGET = b"a", b"r", b"x"

MAX_ENDPOINT_BYTES = 512
"""An endpoint name is ``host:port`` or a URL; a longer one in the stream is refused."""
MAX_CAPACITY = 10_000_000
"""The largest per-endpoint capacity a stream entry may carry (beyond it: refused)."""
_KEY_TYPES = (int, str, bytes)

ROUND_TRIP_KINDS = ("write", "tail", "resync")
"""Who talks to Redis: the write-behind pipelines, the ``XREAD`` tail, the (re)connect resync."""


@dataclass(slots=True, frozen=True)
class SharedIndexSettings:
    """``mmgate.sharedIndex``: the Redis URL and the knobs of the background sync."""

    url: str
    prefix: str = "mmgate"
    outbox_limit: int = 100_000  # changes queued while Redis is slow or away; older ones dropped
    batch_limit: int = 512  # changes per pipelined write
    stream_maxlen: int = 100_000  # entries kept per namespace stream (approximate trim)
    command_timeout_s: float = 2.0  # a background command slower than this counts as Redis down
    retry_min_s: float = 0.05
    retry_max_s: float = 1.0


@dataclass(slots=True)
class _Change:
    namespace: str
    op: bytes
    endpoint: str
    keys: list[Any] = field(default_factory=list)
    capacity: int | None = None
    stamp: float = 0.0


@dataclass(slots=True)
class SharedIndexStats:
    """Plain counters, read by the Prometheus collector at scrape time."""

    up: bool = False
    written: int = 0  # changes sent to Redis
    applied: int = 0  # changes from other processes applied to the local view
    dropped: int = 0  # changes lost because the outbox was full
    refused: int = 0  # stream entries or snapshot members that failed validation (skipped)
    resyncs: int = 0
    failures: int = 0  # times Redis was found unreachable
    round_trips: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUND_TRIP_KINDS, 0))
    """Commands or pipelines sent to Redis, by the task that sent them (:data:`ROUND_TRIP_KINDS`).
    All of them run in the background; the request path sends none."""


class MirroredIndex(AffinityStore[Any]):
    """One namespace: the local view plus the outbox its changes go to. Reads are the local view's."""

    def __init__(self, namespace: str, owner: RedisIndexes) -> None:
        self.namespace = namespace
        self.local: AffinityIndex[Any] = AffinityIndex()
        self._owner = owner

    def add(
        self, endpoint: str, keys: Iterable[Any], capacity: int | None = None, mask: int = PRESENT
    ) -> None:
        batch = list(keys)
        self.local.add(endpoint, batch, capacity, PRESENT)
        self._owner.queue(_Change(self.namespace, ADD, endpoint, batch, capacity, time.time()))

    def remove(self, endpoint: str, keys: Iterable[Any], mask: int = ALL) -> None:
        if mask & PRESENT:
            batch = list(keys)
            self.local.remove(endpoint, batch)
            self._owner.queue(_Change(self.namespace, REMOVE, endpoint, batch))

    def clear(self, endpoint: str, mask: int = ALL) -> None:
        if mask & PRESENT:
            self.remove_endpoint(endpoint)

    def remove_endpoint(self, endpoint: str) -> None:
        self.local.remove_endpoint(endpoint)
        self._owner.queue(_Change(self.namespace, FORGET, endpoint))

    def holders(self, key: Any) -> frozenset[str] | None:
        return self.local.holders(key)

    def holds(self, endpoint: str, key: Any) -> bool:
        return self.local.holds(endpoint, key)

    def mask_of(self, endpoint: str, key: Any) -> int:
        return self.local.mask_of(endpoint, key)

    def longest_prefix(self, keys: Sequence[Any], more: Iterable[Any] = ()) -> dict[str, int]:
        return self.local.longest_prefix(keys, more)

    def keys_of(self, endpoint: str) -> list[Any]:
        return self.local.keys_of(endpoint)

    def held_keys(self) -> list[Any]:
        return self.local.held_keys()

    def endpoints(self) -> list[str]:
        return self.local.endpoints()

    def size(self, endpoint: str) -> int:
        return self.local.size(endpoint)

    def __len__(self) -> int:
        return len(self.local)


class RedisIndexes:
    """The :class:`~mmgate.datalayer.index.store.IndexProvider` for ``mmgate.sharedIndex``.

    Create it before the scheduler (plugins ask it for their namespaces while being built), then
    :meth:`start` it on the running loop and :meth:`stop` it on shutdown.
    """

    def __init__(self, settings: SharedIndexSettings) -> None:
        self.settings = settings
        self.stats = SharedIndexStats()
        self._indexes: dict[str, MirroredIndex] = {}
        self._outbox: deque[_Change] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._origin = b""
        self._last_ids: dict[str, bytes] = {}

    def index(self, namespace: str) -> AffinityStore[Any]:
        made = self._indexes.get(namespace)
        if made is None:
            made = self._indexes[namespace] = MirroredIndex(namespace, self)
        return made

    @property
    def namespaces(self) -> list[str]:
        return list(self._indexes)

    @property
    def pending(self) -> int:
        """Changes waiting to be written."""
        return len(self._outbox)

    def queue(self, change: _Change) -> None:
        if len(self._outbox) >= self.settings.outbox_limit:
            self._outbox.popleft()
            self.stats.dropped += 1
        self._outbox.append(change)
        self._wake.set()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            # Chosen here, not in __init__: ``--workers`` forks after building, and each worker must
            # recognise only its own changes in the stream.
            self._origin = os.urandom(8).hex().encode()
            self._wake = asyncio.Event()
            if self._outbox:
                self._wake.set()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.stats.up = False

    def _key(self, namespace: str, *parts: str) -> str:
        return ":".join((self.settings.prefix, namespace, *parts))

    async def _run(self) -> None:
        delay = self.settings.retry_min_s
        while True:
            writer = self._client()
            reader = self._client()
            try:
                self.stats.round_trips["resync"] += 1
                await writer.ping()
                await self._resync(writer)
                if not self.stats.up:
                    log.info("shared index connected", extra={"fields": {"url": _safe(self.settings.url)}})
                self.stats.up = True
                delay = self.settings.retry_min_s
                await asyncio.gather(self._write_loop(writer), self._tail_loop(reader))
            except (RedisError, OSError) as exc:
                self.stats.failures += 1
                if self.stats.up:
                    log.warning(
                        "shared index unavailable; routing on this process's local view",
                        extra={"fields": {"url": _safe(self.settings.url), "error": type(exc).__name__}},
                    )
                self.stats.up = False
            finally:
                for client in (writer, reader):
                    with contextlib.suppress(Exception):
                        await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.retry_max_s)

    def _client(self) -> aioredis.Redis:
        timeout = self.settings.command_timeout_s
        return aioredis.Redis.from_url(
            self.settings.url, socket_timeout=timeout, socket_connect_timeout=timeout
        )

    async def _resync(self, client: aioredis.Redis) -> None:
        """Merge the shared view into the local one and the local one back into Redis."""
        trips = self.stats.round_trips
        for namespace, index in list(self._indexes.items()):
            log_key = self._key(namespace, "log")
            last: Any = await client.xrevrange(log_key, count=1)
            self._last_ids[namespace] = last[0][0] if last else b"0-0"
            endpoints: Any = await client.smembers(self._key(namespace, "eps"))
            trips["resync"] += 2
            for raw in endpoints:
                endpoint = _endpoint_of(raw)
                if endpoint is None:
                    self.stats.refused += 1
                    continue
                members: Any = await client.zrange(self._key(namespace, "ep", endpoint), 0, -1)
                trips["resync"] += 1
                keys = [k for k in map(_member_key, members) if k is not None]
                self.stats.refused += len(members) - len(keys)
                index.local.add(endpoint, keys)
                await asyncio.sleep(0)  # a large snapshot must not hold the loop in one go
            stamp = time.time()
            for endpoint in index.local.endpoints():
                keys = index.local.keys_of(endpoint)
                for start in range(0, len(keys), self.settings.batch_limit):
                    chunk = keys[start : start + self.settings.batch_limit]
                    scores = {_encode(k): stamp + (start + i) * 1e-6 for i, k in enumerate(chunk)}
                    pipe = client.pipeline(transaction=False)
                    pipe.zadd(self._key(namespace, "ep", endpoint), scores, nx=True)
                    pipe.sadd(self._key(namespace, "eps"), endpoint)
                    trips["resync"] += 1
                    await pipe.execute()
        self.stats.resyncs += 1

    async def _write_loop(self, client: aioredis.Redis) -> None:
        while True:
            if not self._outbox:
                self._wake.clear()
                await self._wake.wait()
            batch: list[_Change] = []
            while self._outbox and len(batch) < self.settings.batch_limit:
                batch.append(self._outbox.popleft())
            try:
                await self._write(client, batch)
            except BaseException:
                for change in reversed(batch):  # not written: back to the front, in order
                    if len(self._outbox) >= self.settings.outbox_limit:
                        self.stats.dropped += 1
                        continue
                    self._outbox.appendleft(change)
                raise
            self.stats.written += len(batch)

    async def _write(self, client: aioredis.Redis, batch: Sequence[_Change]) -> None:
        pipe = client.pipeline(transaction=False)
        for change in batch:
            ns, endpoint = change.namespace, change.endpoint
            ep_key = self._key(ns, "ep", endpoint)
            if change.op == ADD:
                scores = {_encode(k): change.stamp + i * 1e-6 for i, k in enumerate(change.keys)}
                if scores:
                    pipe.zadd(ep_key, scores)
                if change.capacity is not None:
                    pipe.zremrangebyrank(ep_key, 0, -(max(change.capacity, 0) + 1))
                pipe.sadd(self._key(ns, "eps"), endpoint)
            elif change.op == REMOVE:
                if change.keys:
                    pipe.zrem(ep_key, *[_encode(k) for k in change.keys])
            else:
                pipe.delete(ep_key)
                pipe.srem(self._key(ns, "eps"), endpoint)
            fields: dict[Any, Any] = {"o": self._origin, "op": change.op, "e": endpoint}
            if change.keys:
                fields["k"] = _encode(change.keys)
            if change.capacity is not None:
                fields["c"] = change.capacity
            pipe.xadd(self._key(ns, "log"), fields, maxlen=self.settings.stream_maxlen, approximate=True)
        self.stats.round_trips["write"] += 1
        await pipe.execute()

    async def _tail_loop(self, client: aioredis.Redis) -> None:
        by_stream = {self._key(ns, "log"): ns for ns in self._indexes}
        if not by_stream:
            await asyncio.Event().wait()  # nothing to tail; the write loop decides when to fail
        block_ms = max(1, int(self.settings.command_timeout_s * 500))  # answers before the timeout
        while True:
            streams: Any = {key: self._last_ids.get(ns, b"0-0") for key, ns in by_stream.items()}
            self.stats.round_trips["tail"] += 1
            replies: Any = await client.xread(streams, count=1000, block=block_ms)
            for stream, entries in replies or ():
                ns = by_stream[stream.decode() if isinstance(stream, bytes) else stream]
                for entry_id, fields in entries:
                    self._last_ids[ns] = entry_id
                    if fields.get(b"o") != self._origin:
                        if self._apply(self._indexes[ns].local, fields):
                            self.stats.applied += 1
                        else:
                            self.stats.refused += 1
                await asyncio.sleep(0)

    @staticmethod
    def _apply(local: AffinityIndex[Any], fields: dict[bytes, bytes]) -> bool:
        """Apply one stream entry; False (nothing applied) when any field fails validation."""
        op = fields.get(b"op")
        endpoint = _endpoint_of(fields.get(b"e", b""))
        keys = _keys_of(fields.get(b"k"))
        try:
            capacity = _capacity_of(fields.get(b"c"))
        except ValueError:
            return False
        if endpoint is None or keys is None:
            return False
        if op == ADD:
            local.add(endpoint, keys, capacity)
        elif op == REMOVE:
            local.remove(endpoint, keys)
        elif op == FORGET:
            local.remove_endpoint(endpoint)
        else:
            return False
        return True


def _endpoint_of(raw: bytes) -> str | None:
    if not raw or len(raw) > MAX_ENDPOINT_BYTES:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def _keys_of(raw: bytes | None) -> list[Hashable] | None:
    """The entry's keys (none when absent); None when they are not a list of index keys."""
    if raw is None:
        return []
    try:
        keys = _decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(keys, list) or not all(isinstance(k, _KEY_TYPES) for k in keys):
        return None
    return keys


def _member_key(raw: bytes) -> Hashable | None:
    try:
        key = _decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    return key if isinstance(key, _KEY_TYPES) else None


def _capacity_of(raw: bytes | None) -> int | None:
    """The entry's capacity (None: unbounded, as written); ValueError when it is not a valid one."""
    if raw is None:
        return None
    capacity = int(raw)
    if not 0 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity {capacity} outside 0..{MAX_CAPACITY}")
    return capacity


def _safe(url: str) -> str:
    """The URL without a password (``redis://user:secret@host`` → ``redis://user:***@host``)."""
    head, sep, tail = url.rpartition("@")
    if not sep:
        return url
    scheme, _, creds = head.partition("://")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{tail}"


class SharedIndexCollector(Collector):
    """``mmgate_shared_index_*``: whether Redis is reachable and what the sync did."""

    def __init__(self, indexes: RedisIndexes) -> None:
        self.indexes = indexes

    def collect(self) -> Iterator[Metric]:
        s = self.indexes.stats
        yield GaugeMetricFamily(
            "mmgate_shared_index_up",
            "1 while the shared index (Redis) is reachable; 0 = routing on the local view only",
            value=1.0 if s.up else 0.0,
        )
        ops = CounterMetricFamily(
            "mmgate_shared_index_changes",
            "Index changes: written to Redis, applied from other processes, dropped (outbox full),"
            " refused (failed validation)",
            labels=["result"],
        )
        ops.add_metric(["written"], s.written)
        ops.add_metric(["applied"], s.applied)
        ops.add_metric(["dropped"], s.dropped)
        ops.add_metric(["refused"], s.refused)
        yield ops
        yield GaugeMetricFamily(
            "mmgate_shared_index_pending", "Changes waiting to be written", value=self.indexes.pending
        )
        yield CounterMetricFamily(
            "mmgate_shared_index_resyncs", "Snapshot merges after (re)connecting", value=s.resyncs
        )
        yield CounterMetricFamily(
            "mmgate_shared_index_failures", "Times Redis was found unreachable", value=s.failures
        )
        trips = CounterMetricFamily(
            "mmgate_shared_index_round_trips",
            "Commands or pipelines sent to Redis, by background task (the request path sends none)",
            labels=["kind"],
        )
        for kind in ROUND_TRIP_KINDS:
            trips.add_metric([kind], s.round_trips[kind])
        yield trips
