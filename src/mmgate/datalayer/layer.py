"""The data layer as one object the gateway starts and stops: discovery + registry + scraping,
and, when configured, the KV-event subscriber and the shared (Redis) affinity index."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from mmgate.datalayer.discovery import FileDiscovery, StaticDiscovery
from mmgate.datalayer.endpoints import Endpoint, EndpointRecord, EndpointRegistry
from mmgate.datalayer.index.memory import AffinityIndex
from mmgate.datalayer.kubernetes import KubernetesDiscovery, KubernetesSettings
from mmgate.datalayer.kvevents import KVEventsSettings, KVEventSubscriber
from mmgate.datalayer.scraper import MetricsScraper

if (
    TYPE_CHECKING
):  # redis-py is imported only with a shared index (its import loads OpenTelemetry when present)
    from mmgate.datalayer.index.redis_mirror import RedisIndexes


@dataclass(slots=True)
class DataLayerConfig:
    """Knobs with llm-d's defaults: 50 ms refresh, 2 s staleness threshold."""

    endpoints: list[Endpoint] = field(default_factory=list)
    endpoints_file: Path | None = None
    kubernetes: KubernetesSettings | None = None
    scrape_interval_s: float = 0.05
    scrape_timeout_s: float = 1.0
    staleness_s: float = 2.0
    file_poll_s: float = 1.0
    models_interval_s: float = 10.0
    failure_threshold: int = 3
    ssl_context: ssl.SSLContext | None = None  # for https endpoints (None: system trust store)
    kv_events: KVEventsSettings | None = None  # subscribe to the pods' KV events (None: don't)
    # The scheduler's shared indexes (``mmgate.sharedIndex``), built with it and synced from here.
    shared_index: RedisIndexes | None = None
    # The block index the subscriber feeds and precise-prefix-cache-producer reads (None: a new one).
    kv_block_index: AffinityIndex[Any] | None = None


class DataLayer:
    def __init__(self, config: DataLayerConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.registry = EndpointRegistry(failure_threshold=config.failure_threshold)
        self.scraper = MetricsScraper(
            self.registry,
            interval_s=config.scrape_interval_s,
            timeout_s=config.scrape_timeout_s,
            models_interval_s=config.models_interval_s,
            ssl_context=config.ssl_context,
            clock=clock,
        )
        # With a file or Kubernetes, the static endpoints are kept beside what they list.
        self.source: StaticDiscovery | FileDiscovery | KubernetesDiscovery
        if config.kubernetes is not None:
            self.source = KubernetesDiscovery(config.kubernetes, static=config.endpoints)
        elif config.endpoints_file is not None:
            self.source = FileDiscovery(
                config.endpoints_file, poll_interval_s=config.file_poll_s, static=config.endpoints
            )
        else:
            self.source = StaticDiscovery(config.endpoints)
        self.kv_events: KVEventSubscriber | None = None
        if config.kv_events is not None:
            self.kv_events = KVEventSubscriber(self.registry, config.kv_events, config.kv_block_index)
        self.shared_index = config.shared_index

    async def start(self) -> None:
        # Subscriber first: endpoints discovery adds get their sockets as they appear.
        if self.shared_index is not None:
            await self.shared_index.start()
        if self.kv_events is not None:
            await self.kv_events.start()
        await self.scraper.start()
        try:
            await self.source.start(self.registry)
        except BaseException:
            await self._stop_background()
            raise

    async def stop(self) -> None:
        await self.source.stop()
        await self._stop_background()

    async def _stop_background(self) -> None:
        await self.scraper.stop()
        if self.kv_events is not None:
            await self.kv_events.stop()
        if self.shared_index is not None:
            await self.shared_index.stop()

    def follow_objectives(self, listener: Callable[[Mapping[str, int]], None]) -> bool:
        """Have Kubernetes discovery by InferencePool follow the pool's InferenceObjectives
        (call before :meth:`start`); False when discovery has no pool (nothing to follow)."""
        source = self.source
        return isinstance(source, KubernetesDiscovery) and source.follow_objectives(listener)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Expose the subscriber's and the shared index's counters on ``registry``."""
        if self.kv_events is not None:
            registry.register(self.kv_events.collector())
        if self.shared_index is not None:
            from mmgate.datalayer.index.redis_mirror import SharedIndexCollector

            registry.register(SharedIndexCollector(self.shared_index))

    def routable(self) -> list[EndpointRecord]:
        """Endpoints that may receive traffic now (healthy, or not yet proven unhealthy)."""
        return [r for r in self.registry.records() if r.health.healthy]

    def ready(self) -> bool:
        """At least one endpoint has answered a scrape and is healthy, and the KV-event readers (when
        configured) still read: a stopped reader leaves precise routing on a stale index."""
        if not self.kv_events_ingesting():
            return False
        return any(r.health.healthy and r.health.ever_succeeded for r in self.registry.records())

    def kv_events_ingesting(self) -> bool:
        """False only when KV events are configured and a reader has stopped."""
        return self.kv_events is None or self.kv_events.ingesting()

    def models(self) -> list[str]:
        """The union of the models the fleet serves, in first-seen order."""
        return self.registry.models()

    def model_cards(self) -> list[dict[str, Any]]:
        """One ``/v1/models`` object per model id the fleet serves (the first endpoint's)."""
        return self.registry.model_cards()
