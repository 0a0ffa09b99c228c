"""The gateway's HTTP front: OpenAI-compatible routes, health, readiness and metrics.

A request is read once, parsed once (:func:`mmgate.request.parse_request`), and handed with its
original bytes to :class:`~mmgate.gateway.proxy.Proxy`. Client mistakes become OpenAI-shaped
4xx errors that name the field; a 5xx from the gateway itself means a gateway or fleet problem.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mmgate.datalayer.endpoints import Endpoint, EndpointRecord
from mmgate.datalayer.layer import DataLayer, DataLayerConfig
from mmgate.errors import RequestError
from mmgate.gateway.admission import Admission, AdmissionSettings, Overloaded, client_key
from mmgate.gateway.body import read_body
from mmgate.gateway.headers import REQUEST_ID, request_id_from
from mmgate.gateway.proxy import Outcome, Proxy, ProxySettings
from mmgate.gateway.responses import error_response, request_error_response
from mmgate.gateway.routing import Router
from mmgate.gateway.telemetry import Telemetry
from mmgate.request.view import Api, RequestView

log = logging.getLogger("mmgate.gateway")
access_log = logging.getLogger("mmgate.access")

Parser = Callable[[bytes, Mapping[str, str], Api], RequestView]

ROUTES: dict[str, Api] = {
    "/v1/chat/completions": Api.CHAT,
    "/v1/completions": Api.COMPLETIONS,
    "/v1/messages": Api.MESSAGES,
}


@dataclass(slots=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8080
    data: DataLayerConfig = field(default_factory=DataLayerConfig)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    max_body_bytes: int = 64 * 1024 * 1024
    body_timeout_s: float = 30.0  # the whole body must arrive within this (slow-loris bodies: 408)
    access_log: bool = True
    admin_port: int | None = None  # serve /metrics and /ready there instead (0 picks a free port)
    max_inflight: int = 0  # proxied requests at once; beyond it a 429 (0 = no limit)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)  # queue, per-client


class Gateway:
    """Owns the data layer, the proxy and the telemetry; :meth:`app` is the aiohttp application."""

    def __init__(
        self,
        settings: GatewaySettings,
        router: Router,
        parse: Parser,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.router = router
        self.parse = parse
        self.clock = clock
        self.data = DataLayer(settings.data, clock=clock)
        self.telemetry = Telemetry(self.data.registry, clock)
        self.proxy = Proxy(self.data, router, self.telemetry, settings.proxy, clock=clock)
        self.data.registry.on_remove(self._forget)
        self.admission = Admission(settings.admission)

    @property
    def inflight(self) -> int:
        """Requests holding an admission slot now."""
        return self.admission.inflight

    def _forget(self, endpoint: Endpoint) -> None:
        self.router.forget(endpoint.name)
        self.proxy.breaker.forget(endpoint.name)

    async def start(self) -> None:
        await self.proxy.start()
        try:
            await self.data.start()
        except BaseException:
            await self.proxy.stop()
            raise

    async def stop(self) -> None:
        await self.data.stop()
        await self.proxy.stop()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes, middlewares=[_errors_middleware])
        for path, api in ROUTES.items():
            app.router.add_post(path, self._api_handler(api), expect_handler=self._expect)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        if self.settings.admin_port is None:
            self._add_admin_routes(app)

        async def on_startup(_app: web.Application) -> None:
            await self.start()

        async def on_cleanup(_app: web.Application) -> None:
            await self.stop()

        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)
        return app

    def admin_app(self) -> web.Application:
        """``/metrics``, ``/ready`` and ``/health`` alone, for a separate admin port: the fleet's
        state and the gateway's counters need not be reachable by API clients."""
        app = web.Application(middlewares=[_errors_middleware])
        app.router.add_get("/health", self.health)
        self._add_admin_routes(app)
        return app

    def _add_admin_routes(self, app: web.Application) -> None:
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/metrics", self.metrics)

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue``: refuse an over-limit body before the client sends it; any
        other expectation is a 417 in the OpenAI shape (aiohttp's own answer is plain text)."""
        expect = request.headers.get("Expect", "")
        if expect.lower() != "100-continue":
            return error_response(417, f"unsupported Expect header: {expect[:64]!r}", param="Expect")
        declared = request.content_length
        if declared is not None and declared > self.settings.max_body_bytes:
            return error_response(
                413,
                f"request body too large: {declared} bytes; the limit is {self.settings.max_body_bytes}",
                param="body",
                code="body_too_large",
            )
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None

    def _api_handler(self, api: Api) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self.handle(request, api)

        return handler

    def candidates(self, model: str) -> list[EndpointRecord]:
        """Healthy endpoints that serve ``model`` (or whose models are not known yet).

        Raises a 404 :class:`RequestError` when every endpoint lists its models and none lists
        this one: that is a client mistake, not a fleet problem.
        """
        records = self.data.registry.records()
        if records and all(r.models for r in records) and not any(model in r.models for r in records):
            served = ", ".join(self.data.models()[:20])
            raise RequestError(
                f"The model '{model}' is not served here; available: {served}",
                param="model",
                status=404,
                code="model_not_found",
            )
        return [r for r in records if r.health.healthy and (not r.models or model in r.models)]

    async def handle(self, request: web.Request, api: Api) -> web.StreamResponse:
        received = self.clock()
        request_id = request_id_from(request.headers)
        out = Outcome()
        view: RequestView | None = None
        try:
            body = await self._read_body(request)
            view = self.parse(body, request.headers, api)
            candidates = self.candidates(view.model)
            if not candidates:
                out.status = 503
                reason = (
                    "no endpoints are configured" if not len(self.data.registry) else "no healthy endpoint"
                )
                return error_response(
                    503,
                    f"{reason} for model '{view.model}'; try again shortly",
                    code="no_endpoint",
                    headers={"Retry-After": "1", REQUEST_ID: request_id},
                )
            client = client_key(request.headers, request.remote)
            try:
                await self.admission.enter(self.settings.max_inflight, client)
            except Overloaded as exc:
                out.status = 429
                return error_response(
                    429,
                    exc.message,
                    code="overloaded",
                    headers={"Retry-After": str(exc.retry_after_s), REQUEST_ID: request_id},
                )
            self.telemetry.inflight.inc()
            try:
                return await self.proxy.forward(request, body, view, candidates, request_id, received, out)
            finally:
                self.admission.leave(client)
                self.telemetry.inflight.dec()
        except RequestError as exc:
            out.status = exc.status
            return request_error_response(exc, headers={REQUEST_ID: request_id})
        except web.HTTPException as exc:  # e.g. body over the limit; shaped by the middleware
            out.status = exc.status
            raise
        except asyncio.CancelledError:  # the client went away; the upstream request was closed
            out.label = "client_closed"
            raise
        finally:
            self._record(api, view, out, received, request_id)

    async def _read_body(self, request: web.Request) -> bytes:
        """The body, within ``body_timeout_s``: a client trickling bytes cannot hold a handler."""
        timeout = self.settings.body_timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await read_body(request, self.settings.max_body_bytes)
        except TimeoutError:
            raise RequestError(
                f"The request body did not arrive within {timeout:g} s.",
                param="body",
                status=408,
                code="body_timeout",
            ) from None

    def _record(
        self, api: Api, view: RequestView | None, out: Outcome, received: float, request_id: str
    ) -> None:
        model = view.model if view is not None else "-"
        status = out.label or str(out.status or 500)
        self.telemetry.requests.labels(model, status, out.endpoint or "-").inc()
        duration = self.clock() - received
        if out.endpoint:
            self.telemetry.request_latency.labels(model).observe(duration)
        if out.first_byte_s is not None:
            self.telemetry.ttfb.labels(model).observe(out.first_byte_s)
        if not self.settings.access_log:
            return
        fields: dict[str, Any] = {
            "request_id": request_id,
            "api": api.value,
            "model": model,
            "status": status,
            "endpoint": out.endpoint or None,
            "attempts": out.attempts,
            "duration_ms": round(duration * 1000, 3),
        }
        if view is not None:
            fields["stream"] = view.stream
            media: dict[str, int] = {}
            for asset in view.assets:
                media[asset.modality.value] = media.get(asset.modality.value, 0) + 1
            fields["media"] = media
        if out.decision is not None:
            fields["request_tokens"] = out.decision.request_tokens
            fields["decision_us"] = round(out.decision_s * 1e6, 1)
        if out.first_byte_s is not None:
            fields["ttfb_ms"] = round(out.first_byte_s * 1000, 3)
        if out.errors:
            fields["errors"] = out.errors[-5:]
        access_log.info("request", extra={"fields": fields})

    async def models(self, _request: web.Request) -> web.Response:
        data = self.data.model_cards()
        return web.Response(
            body=orjson.dumps({"object": "list", "data": data}), content_type="application/json"
        )

    async def health(self, _request: web.Request) -> web.Response:
        """Liveness: the gateway process answers. Says nothing about the fleet."""
        return web.json_response({"status": "ok"})

    async def ready(self, _request: web.Request) -> web.Response:
        """Readiness: at least one endpoint is healthy and has answered a scrape."""
        now = self.clock()
        endpoints = {}
        for record in self.data.registry.records():
            endpoints[record.name] = {
                "healthy": record.health.healthy,
                "metrics_age_s": None
                if record.metrics is None
                else round(now - record.metrics.scraped_at, 3),
                "models": list(record.models),
                "last_error": record.health.last_error,
            }
        ready = self.data.ready()
        return web.json_response({"ready": ready, "endpoints": endpoints}, status=200 if ready else 503)

    async def metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.telemetry.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


@web.middleware
async def _errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every error a client can see is OpenAI-shaped JSON, including aiohttp's own 404/405/413."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(413, f"request body too large: {exc.text}", param="body", code="body_too_large")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = f"{exc.reason}: {request.method} {request.path}"
        return error_response(
            exc.status, message, headers={k: v for k, v in exc.headers.items() if k == "Allow"}
        )
    except RequestError as exc:
        return request_error_response(exc)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal gateway error; see the gateway log", code="internal_error")
