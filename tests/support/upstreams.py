"""Real HTTP pieces on loopback for the gateway's own tests: a scriptable upstream, a recording
endpoint picker and a started gateway. (End-to-end tests use the real simulator instead.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from mmgate.control.decision import Decision, NoEndpoint
from mmgate.datalayer.endpoints import EndpointRecord, parse_endpoint
from mmgate.datalayer.layer import DataLayerConfig
from mmgate.errors import RequestError
from mmgate.gateway.app import Running, start
from mmgate.gateway.proxy import ProxySettings
from mmgate.gateway.server import Gateway, GatewaySettings
from mmgate.request.view import Api, RequestView


async def serve(app: web.Application, host: str = "127.0.0.1") -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port: int = runner.addresses[0][1]
    return runner, port


Behaviour = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]


class Upstream:
    """A model-server stand-in whose completion behaviour a test scripts."""

    def __init__(self, model: str = "m") -> None:
        self.model = model
        self.bodies: list[bytes] = []
        self.headers: list[Mapping[str, str]] = []
        self.behaviour: Behaviour = self.ok
        self.runner: web.AppRunner | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def ok(self, request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"served_by": self.address, "echo_len": len(body)})

    async def completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        return await self.behaviour(request, body)

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(text='vllm:num_requests_waiting{model_name="m"} 0\n')

    async def models(self, _request: web.Request) -> web.Response:
        card = {"id": self.model, "object": "model", "max_model_len": 4096}
        return web.json_response({"object": "list", "data": [card]})

    async def start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages"):
            app.router.add_post(path, self.completion)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        self.runner, self.port = await serve(app)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


def sse_behaviour(chunks: Sequence[bytes], delay: float) -> Behaviour:
    async def behaviour(request: web.Request, _body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(chunk)
            await asyncio.sleep(delay)
        await resp.write_eof()
        return resp

    return behaviour


def status_behaviour(status: int) -> Behaviour:
    async def behaviour(_request: web.Request, _body: bytes) -> web.StreamResponse:
        return web.json_response({"error": {"message": f"upstream says {status}"}}, status=status)

    return behaviour


@dataclass
class OrderRouter:
    """Picks candidates in a fixed preference order and records every lifecycle call."""

    order: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    hooks: int = 0

    def decide(
        self, view: RequestView, candidates: Sequence[EndpointRecord], now: float, **_context: Any
    ) -> Decision:
        names = [c.name for c in candidates]
        ranked = [n for n in self.order if n in names] + [n for n in names if n not in self.order]
        if not ranked:
            raise NoEndpoint("nothing left")
        return Decision(
            endpoint=ranked[0],
            request_tokens=42,
            tokens_by_modality={"text": 40, "image": 2},
            scores={n: {"test-scorer": 1.0 if n == ranked[0] else 0.0} for n in names},
            headers={"x-prefiller-host-port": "10.0.0.1:1"},
            encoder_items={"image": 1},
            encoder_hits={"image": 1},
            prefix_match=0.5,
            pre_request=self._hook,
        )

    def _hook(self) -> None:
        self.hooks += 1

    def fallbacks(self, decision: Decision) -> list[str]:
        return [n for n in self.order if n != decision.endpoint]

    def started(self, decision: Decision) -> None:
        self.calls.append(("started", decision.endpoint))

    def first_token(self, decision: Decision) -> None:
        self.calls.append(("first_token", decision.endpoint))

    def stage_done(self, decision: Decision, endpoint: str) -> None:
        self.calls.append(("stage_done", endpoint))

    def finished(self, decision: Decision, *, ok: bool) -> None:
        self.calls.append(("finished" if ok else "failed", decision.endpoint))

    def forget(self, endpoint: str) -> None:
        self.forgotten.append(endpoint)


def tiny_parse(body: bytes, headers: Mapping[str, str], api: Api) -> RequestView:
    """Just enough parsing for proxy tests (the real parser is tested by its owner)."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestError("body is not valid JSON", param="body") from None
    if not isinstance(doc.get("model"), str):
        raise RequestError("'model' is required", param="model")
    stream = bool(doc.get("stream"))
    return RequestView(api=api, model=doc["model"], parts=[body.decode()], body=body, stream=stream)


async def start_gateway(
    addresses: Sequence[str],
    router: Any,
    *,
    parse: Any = tiny_parse,
    proxy: ProxySettings | None = None,
    max_body_bytes: int = 1 << 20,
    **settings_kw: Any,
) -> tuple[Gateway, Running, str]:
    settings = GatewaySettings(
        data=DataLayerConfig(endpoints=[parse_endpoint(a) for a in addresses], scrape_interval_s=0.05),
        proxy=proxy or ProxySettings(debug_scores=True),
        max_body_bytes=max_body_bytes,
        **settings_kw,
    )
    gateway = Gateway(settings, router, parse)
    running = await start(gateway, "127.0.0.1", 0)
    return gateway, running, running.url


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
