"""The gateway's routes: OpenAI-compatible APIs, health, readiness and metrics.

A request arrives whole from :mod:`mmgate.gateway.h1.server` (which already enforced the head and
body limits and timeouts), is parsed once (:func:`mmgate.request.parse_request`), and handed with
its original bytes to :class:`~mmgate.gateway.proxy.Proxy`. Client mistakes become OpenAI-shaped
4xx errors that name the field; a 5xx from the gateway itself means a gateway or fleet problem.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mmgate.datalayer.endpoints import Endpoint, EndpointRecord
from mmgate.datalayer.layer import DataLayer, DataLayerConfig
from mmgate.errors import RequestError
from mmgate.gateway.admission import Admission, AdmissionSettings, Overloaded, client_key
from mmgate.gateway.h1.request import Request
from mmgate.gateway.h1.server import ServerLimits
from mmgate.gateway.h1.writer import ResponseWriter
from mmgate.gateway.headers import REQUEST_ID, request_id_from
from mmgate.gateway.proxy import Outcome, Proxy, ProxySettings
from mmgate.gateway.responses import Response, error_response, json_response, request_error_response
from mmgate.gateway.routing import Router
from mmgate.gateway.telemetry import Telemetry
from mmgate.request.view import Api, RequestView

log = logging.getLogger("mmgate.gateway")
access_log = logging.getLogger("mmgate.access")

Parser = Callable[[bytes, Mapping[str, str], Api], RequestView]
RouteHandler = Callable[[Request, ResponseWriter], Awaitable[None]]
Routes = dict[str, tuple[str, RouteHandler]]  # path -> (method, handler)

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
    header_timeout_s: float = 10.0  # the request head must arrive within this (slow-loris heads: 408)
    max_header_bytes: int = 64 * 1024  # request line and headers together (431 beyond)
    keepalive_timeout_s: float = 75.0  # idle client connections are closed after this
    send_timeout_s: float = 60.0  # a client that accepts no response bytes for this long is cut off
    access_log: bool = True
    admin_port: int | None = None  # serve /metrics and /ready there instead (0 picks a free port)
    max_inflight: int = 0  # proxied requests at once; beyond it a 429 (0 = no limit)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)  # queue, per-client

    def server_limits(self) -> ServerLimits:
        return ServerLimits(
            max_body_bytes=self.max_body_bytes,
            max_header_bytes=self.max_header_bytes,
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            keepalive_timeout_s=self.keepalive_timeout_s,
            send_timeout_s=self.send_timeout_s,
        )


class Gateway:
    """Owns the data layer, the proxy and the telemetry; :meth:`routes` is what it serves."""

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
        self.telemetry.inflight_from(lambda: self.admission.inflight)  # read at scrape time

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

    def routes(self) -> Routes:
        """The API port's routes (``/metrics`` and ``/ready`` too unless an admin port is set)."""
        routes: Routes = {path: ("POST", self._api_handler(api)) for path, api in ROUTES.items()}
        routes["/v1/models"] = ("GET", self._simple(self.models))
        routes["/health"] = ("GET", self._simple(self.health))
        if self.settings.admin_port is None:
            routes.update(self._admin_routes())
        return routes

    def admin_routes(self) -> Routes:
        """``/metrics``, ``/ready`` and ``/health`` alone, for a separate admin port: the fleet's
        state and the gateway's counters need not be reachable by API clients."""
        return {"/health": ("GET", self._simple(self.health)), **self._admin_routes()}

    def _admin_routes(self) -> Routes:
        return {"/ready": ("GET", self._simple(self.ready)), "/metrics": ("GET", self._simple(self.metrics))}

    def dispatcher(self, routes: Routes) -> Callable[[Request, ResponseWriter], Awaitable[None]]:
        """The server handler for ``routes``: 404 for an unknown path, 405 (with Allow) for a
        known path asked with another method, both OpenAI-shaped. HEAD is served by GET routes."""

        async def dispatch(request: Request, writer: ResponseWriter) -> None:
            route = routes.get(request.path)
            if route is None:
                writer.send(error_response(404, f"Not Found: {request.method} {request.path}"))
                return
            method, handler = route
            if request.method != method:
                if method == "GET" and request.method == "HEAD":
                    # Probes and load balancers ask HEAD: GET's status and headers, no body.
                    writer.head_only = True
                else:
                    allow = "GET, HEAD" if method == "GET" else method
                    message = f"Method Not Allowed: {request.method} {request.path}"
                    writer.send(error_response(405, message, headers={"Allow": allow}))
                    return
            await handler(request, writer)

        return dispatch

    def refused(self, status: int) -> None:
        """The HTTP layer refused a request before it reached a route (400/408/413/417/431)."""
        self.telemetry.requests.labels("-", str(status), "-").inc()

    def _api_handler(self, api: Api) -> RouteHandler:
        async def handler(request: Request, writer: ResponseWriter) -> None:
            await self.handle(request, writer, api)

        return handler

    @staticmethod
    def _simple(answer: Callable[[], Response]) -> RouteHandler:
        async def handler(_request: Request, writer: ResponseWriter) -> None:
            writer.send(answer())

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

    async def handle(self, request: Request, writer: ResponseWriter, api: Api) -> None:
        received = self.clock()
        headers = request.headers
        request_id = request_id_from(headers)
        out = Outcome()
        view: RequestView | None = None
        try:
            view = self.parse(request.body, headers, api)
            candidates = self.candidates(view.model)
            if not candidates:
                out.status = 503
                reason = (
                    "no endpoints are configured" if not len(self.data.registry) else "no healthy endpoint"
                )
                writer.send(
                    error_response(
                        503,
                        f"{reason} for model '{view.model}'; try again shortly",
                        code="no_endpoint",
                        headers={"Retry-After": "1", REQUEST_ID: request_id},
                    )
                )
                return
            client = client_key(headers, request.remote)
            try:
                await self.admission.enter(self.settings.max_inflight, client)
            except Overloaded as exc:
                out.status = 429
                writer.send(
                    error_response(
                        429,
                        exc.message,
                        code="overloaded",
                        headers={"Retry-After": str(exc.retry_after_s), REQUEST_ID: request_id},
                    )
                )
                return
            try:
                await self.proxy.forward(request, writer, view, candidates, request_id, received, out)
            finally:
                self.admission.leave(client)
        except RequestError as exc:
            out.status = exc.status
            writer.send(request_error_response(exc, headers={REQUEST_ID: request_id}))
        except asyncio.CancelledError:  # the client went away; the upstream request was closed
            out.label = "client_closed"
            raise
        finally:
            self._record(api, view, out, received, request_id)

    def _record(
        self, api: Api, view: RequestView | None, out: Outcome, received: float, request_id: str
    ) -> None:
        model = view.model if view is not None else "-"
        status = out.label or str(out.status or 500)
        duration = self.clock() - received
        self.telemetry.request_done(model, status, out.endpoint, duration, out.first_byte_s)
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

    def models(self) -> Response:
        return json_response({"object": "list", "data": self.data.model_cards()})

    def health(self) -> Response:
        """Liveness: the gateway process answers. Says nothing about the fleet."""
        return json_response({"status": "ok"})

    def ready(self) -> Response:
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
        return json_response({"ready": ready, "endpoints": endpoints}, status=200 if ready else 503)

    def metrics(self) -> Response:
        return Response(200, generate_latest(self.telemetry.registry), CONTENT_TYPE_LATEST)
