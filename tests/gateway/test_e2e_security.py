"""Security promises: routing headers only the gateway sets, API keys passed through and never
logged, media payloads never logged, and no URL fetched by the gateway."""

from __future__ import annotations

import asyncio
import base64
import io
import logging
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from mmgate.control.parser import make_parser
from mmgate.logs import JsonFormatter
from mmgate.request.limits import Limits
from support.stack import png
from support.upstreams import OrderRouter, Upstream, serve, start_gateway, status_behaviour

SECRET = "sk-live-0123456789abcdefSECRET"
ROUTING = {
    "x-gateway-destination-endpoint": "169.254.169.254:80",
    "x-prefiller-host-port": "10.9.9.9:1",
    "x-encoder-hosts-ports": "10.9.9.9:2",
    "x-data-parallel-host-port": "10.9.9.9:3",
    "x-kv-cache-source-host-port": "10.9.9.9:4",
    "test-epp-endpoint-selection": "10.9.9.9:5",
    "x-mmgate-endpoint": "10.9.9.9:6",
}


@pytest.fixture
async def logs() -> AsyncIterator[io.StringIO]:
    """Everything mmgate logs, formatted exactly as ``mmgate serve`` writes it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("mmgate")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield out
    root.removeHandler(handler)
    root.setLevel(old_level)


async def test_keys_and_media_never_reach_the_logs_and_routing_headers_never_reach_upstream(
    logs: io.StringIO,
) -> None:
    ups = [Upstream(model="m"), Upstream(model="m")]
    for u in ups:
        await u.start()
    ups[0].behaviour = status_behaviour(500)  # failures are logged too: still nothing secret
    router = OrderRouter(order=[ups[0].address, ups[1].address])
    gateway, running, url = await start_gateway(
        [u.address for u in ups], router, parse=make_parser(Limits()), max_body_bytes=8 << 20
    )
    image = png(11, (64, 48))
    b64 = base64.b64encode(image).decode()
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "private prompt text 7781"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64}},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://internal.example/secret-path.png"},
                        },
                    ],
                }
            ],
        }
    )
    try:
        async with aiohttp.ClientSession() as session:
            while not all(r.metrics is not None for r in gateway.data.registry.records()):
                await asyncio.sleep(0.02)
            headers = {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET, **ROUTING}
            async with session.post(url + "/v1/chat/completions", data=body, headers=headers) as resp:
                assert resp.status == 200
            bad = body.replace(b"base64,", b"base64,!!")
            async with session.post(url + "/v1/chat/completions", data=bad, headers=headers) as resp:
                assert resp.status == 400
    finally:
        await running.stop()
        for u in ups:
            await u.stop()

    # The API key went upstream untouched, to both the failing and the serving endpoint.
    for seen in (ups[0].headers[0], ups[1].headers[0]):
        assert seen["Authorization"] == f"Bearer {SECRET}"
        lowered = {k.lower(): v for k, v in seen.items()}
        for name, value in ROUTING.items():
            assert lowered.get(name) != value, name  # the client's copy never crossed
    # Only the gateway's own routing decision is set (OrderRouter asks for this prefiller).
    assert ups[1].headers[0]["x-prefiller-host-port"] == "10.0.0.1:1"

    text = logs.getvalue()
    assert "HTTP 500" in text  # the failed attempt is in the log line's errors
    assert text.count('"msg":"request"') == 2  # both requests were logged...
    for secret in (SECRET, b64[:40], b64[-40:], "private prompt text", "internal.example", "secret-path"):
        assert secret not in text, secret  # ...without keys, prompts, media or URLs


async def test_the_gateway_fetches_no_url_it_is_given() -> None:
    hits: list[str] = []

    async def trap(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=png(1, (10, 10)), content_type="image/png")

    app = web.Application()
    app.router.add_get("/{tail:.*}", trap)
    trap_runner, trap_port = await serve(app)
    ups = [Upstream(model="m")]
    await ups[0].start()
    gateway, running, url = await start_gateway(
        [ups[0].address], OrderRouter(), parse=make_parser(Limits()), max_body_bytes=1 << 20
    )
    image_url = f"http://127.0.0.1:{trap_port}/cat.png"
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}}]}
            ],
        }
    )
    try:
        async with aiohttp.ClientSession() as session:
            while not all(r.metrics is not None for r in gateway.data.registry.records()):
                await asyncio.sleep(0.02)
            async with session.post(url + "/v1/chat/completions", data=body) as resp:
                assert resp.status == 200
        assert hits == []  # priced with the configured default; the URL is the model server's business
        assert ups[0].bodies == [body]
    finally:
        await running.stop()
        await ups[0].stop()
        await trap_runner.cleanup()


async def test_metrics_and_readiness_can_live_on_a_separate_admin_port() -> None:
    from mmgate.gateway.app import start

    ups = [Upstream(model="m")]
    await ups[0].start()
    gateway, running, _url = await start_gateway([ups[0].address], OrderRouter(), max_body_bytes=1 << 20)
    await running.stop()  # only its wiring is reused: start it the way `mmgate serve` does
    gateway.settings.admin_port = 0
    running = await start(gateway, "127.0.0.1", 0)
    try:
        assert running.admin_port not in (None, running.port)
        admin = f"http://127.0.0.1:{running.admin_port}"
        async with aiohttp.ClientSession() as session:
            for path in ("/metrics", "/ready"):
                async with session.get(running.url + path) as resp:
                    assert resp.status == 404, path  # not on the API port
            async with session.get(admin + "/metrics") as resp:
                assert resp.status == 200 and "mmgate_requests_total" in await resp.text()
            for base in (running.url, admin):
                async with session.get(base + "/health") as resp:
                    assert resp.status == 200
    finally:
        await running.stop()
        await ups[0].stop()
