"""The scraper against real HTTP servers on loopback."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from mmgate.datalayer import DataLayer, DataLayerConfig, parse_endpoint
from support.waiting import until


class FakePod:
    """A tiny real HTTP server whose /metrics can be made slow or failing."""

    def __init__(self) -> None:
        self.waiting = 0
        self.delay = 0.0
        self.status = 200
        self.in_flight = 0
        self.max_in_flight = 0
        self.hits = 0
        self.runner: web.AppRunner | None = None
        self.address = ""

    async def metrics(self, _request: web.Request) -> web.Response:
        self.hits += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        body = f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}\n'
        return web.Response(body=body.encode(), status=self.status)

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.address = f"127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def pod() -> AsyncIterator[FakePod]:
    p = FakePod()
    await p.start()
    yield p
    await p.stop()


async def test_scrapes_metrics_and_models_and_tracks_health(pod: FakePod) -> None:
    layer = DataLayer(DataLayerConfig(endpoints=[parse_endpoint(pod.address)], scrape_interval_s=0.02))
    await layer.start()
    try:
        record = layer.registry.get(pod.address)
        assert record is not None
        pod.waiting = 5
        await until(lambda: record.metrics is not None and record.metrics.waiting == 5)
        await until(lambda: layer.models() == ["m"])
        assert layer.ready()
        pod.status = 500
        await until(lambda: not record.health.healthy)
        assert layer.routable() == [] and not layer.ready()
        pod.status = 200
        await until(lambda: record.health.healthy)
    finally:
        await layer.stop()


async def test_a_slow_pod_never_has_two_scrapes_in_flight_and_goes_stale(pod: FakePod) -> None:
    config = DataLayerConfig(
        endpoints=[parse_endpoint(pod.address)], scrape_interval_s=0.01, scrape_timeout_s=0.5, staleness_s=0.1
    )
    layer = DataLayer(config)
    await layer.start()
    try:
        record = layer.registry.get(pod.address)
        assert record is not None
        await until(lambda: record.metrics is not None)
        pod.delay = 0.3  # slower than the tick and than the staleness threshold, within the timeout
        await asyncio.sleep(0.25)
        assert record.fresh_metrics(layer.clock(), config.staleness_s) is None
        await asyncio.sleep(0.5)
        assert pod.max_in_flight == 1
        assert record.health.healthy  # slow is not dead
        pod.delay = 1.0  # now past the timeout
        await until(lambda: not record.health.healthy)
        assert "timed out" in (record.health.last_error or "")
    finally:
        await layer.stop()


async def test_removed_endpoint_stops_being_scraped(pod: FakePod) -> None:
    layer = DataLayer(DataLayerConfig(endpoints=[parse_endpoint(pod.address)], scrape_interval_s=0.01))
    await layer.start()
    try:
        await until(lambda: pod.hits > 2)
        layer.registry.remove(pod.address)
        await asyncio.sleep(0.05)
        hits = pod.hits
        await asyncio.sleep(0.1)
        assert pod.hits == hits
    finally:
        await layer.stop()
