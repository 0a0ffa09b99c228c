"""Polls every endpoint's ``/metrics`` (default every 50 ms) and, less often, ``/v1/models``.

One loop per endpoint, each awaiting its own scrape before sleeping until the next tick, so a
slow pod never has more than one scrape in flight (no pile-up) and never delays the others.
All loops share one aiohttp session with its own small connection pool, separate from the
proxy's, so long-running streams can never starve the scrapes. Every scrape has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from mmgate.datalayer.endpoints import Endpoint, EndpointRecord, EndpointRegistry
from mmgate.datalayer.metrics import parse_metrics
from mmgate.vllm.lora import adapters_of

log = logging.getLogger("mmgate.datalayer")


def model_cards(body: bytes) -> tuple[dict[str, Any], ...]:
    """The model objects of an OpenAI ``/v1/models`` body (each has a string ``id``); malformed
    bodies give none. Kept whole so the gateway's listing shows what the servers said
    (``max_model_len``, ``owned_by``, ...)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ()
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return ()
    return tuple(m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str))


RefreshListener = Callable[[EndpointRecord], None]


class MetricsScraper:
    def __init__(
        self,
        registry: EndpointRegistry,
        *,
        interval_s: float = 0.05,
        timeout_s: float = 1.0,
        path: str = "/metrics",
        models_interval_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.path = path
        self.models_interval_s = models_interval_s
        self.clock = clock
        # The proxy's context, so both trust the same CAs (None: aiohttp's default, verifying).
        self.ssl_context = ssl_context
        self.scrapes = 0
        self.failures = 0
        self._session: aiohttp.ClientSession | None = None
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._refresh_listeners: list[RefreshListener] = []
        registry.on_add(self._start_loop)
        registry.on_remove(self._stop_loop)

    def on_refresh(self, listener: RefreshListener) -> None:
        """``listener(record)`` after each scrape that refreshed ``record.metrics`` (flow control
        releases held requests the moment a pod has room)."""
        self._refresh_listeners.append(listener)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=2, keepalive_timeout=30, ssl=self.ssl_context or True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            auto_decompress=True,
        )
        for record in self.registry.records():
            self._start_loop(record.endpoint)

    async def stop(self) -> None:
        loops = list(self._loops.values())
        self._loops.clear()
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _start_loop(self, endpoint: Endpoint) -> None:
        if self._session is None or endpoint.name in self._loops:
            return
        self._loops[endpoint.name] = asyncio.create_task(
            self._loop(endpoint.name), name=f"mmgate-scrape-{endpoint.name}"
        )

    def _stop_loop(self, endpoint: Endpoint) -> None:
        task = self._loops.pop(endpoint.name, None)
        if task is not None:
            task.cancel()

    async def _loop(self, name: str) -> None:
        # A random phase spreads the fleet's scrapes over the tick instead of bursting together.
        await asyncio.sleep(random.random() * self.interval_s)
        next_models = 0.0
        while True:
            record = self.registry.get(name)
            if record is None:
                return
            started = self.clock()
            ok = await self.scrape_once(record)
            if ok and started >= next_models:
                await self.fetch_models(record)
                next_models = started + self.models_interval_s
            await asyncio.sleep(max(0.0, self.interval_s - (self.clock() - started)))

    async def scrape_once(self, record: EndpointRecord) -> bool:
        """One scrape of one endpoint; updates its metrics and health. Never raises."""
        assert self._session is not None, "start() first"
        self.scrapes += 1
        error: str | None = None
        try:
            async with self._session.get(record.endpoint.url + self.path) as resp:
                body = await resp.read()
                if resp.status != 200:
                    error = f"/metrics returned HTTP {resp.status}"
                else:
                    record.metrics = parse_metrics(body, now=self.clock(), adapters=record.adapters)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            error = f"/metrics timed out after {self.timeout_s}s"
        except (aiohttp.ClientError, OSError) as exc:
            error = f"/metrics failed: {type(exc).__name__}: {exc}"
        if error is None:
            changed = record.health.record_success()
        else:
            self.failures += 1
            changed = record.health.record_failure(error)
        if changed:
            state = "healthy" if record.health.healthy else f"unhealthy ({error})"
            log.warning("endpoint %s is %s", record.name, state)
        if error is None:
            for listener in self._refresh_listeners:
                listener(record)
        return error is None

    async def fetch_models(self, record: EndpointRecord) -> None:
        assert self._session is not None, "start() first"
        try:
            async with self._session.get(record.endpoint.url + "/v1/models") as resp:
                if resp.status == 200:
                    cards = model_cards(await resp.read())
                    record.model_cards = cards
                    record.models = tuple(card["id"] for card in cards)
                    record.adapters = adapters_of(cards)
        except asyncio.CancelledError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.debug("models of %s not fetched: %s", record.name, exc)
