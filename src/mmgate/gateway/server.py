"""The gateway's routes: OpenAI-compatible APIs, health, readiness and metrics.

A request arrives whole from :mod:`mmgate.http.server` (which already enforced the head and
body limits and timeouts). The :class:`~mmgate.control.RequestController` parses it once, finds
its candidates and admits it; :class:`~mmgate.gateway.proxy.Proxy` forwards its original bytes to
the endpoints the controller picks. This module turns the controller's refusals into answers:
client mistakes become OpenAI-shaped 4xx errors that name the field; a 5xx from the gateway itself
means a gateway or fleet problem.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mmgate.control.admission import Overloaded, client_key
from mmgate.control.apikeys import KeyStore
from mmgate.control.controller import (
    ControlSettings,
    Flight,
    NoCandidates,
    RequestController,
    RequestTrace,
)
from mmgate.control.decision import EndpointPicker
from mmgate.control.flow import FlowGate, FlowSettings
from mmgate.control.parser import PARSED_HEADERS, Parser
from mmgate.datalayer.layer import DataLayer, DataLayerConfig
from mmgate.datalayer.metrics import MetricsSnapshot
from mmgate.disagg.orchestrate import OrchestrationSettings, StageMetrics
from mmgate.errors import RequestError, did_you_mean
from mmgate.gateway.flowmetrics import FlowCollector
from mmgate.gateway.proxy import Forwarded, Proxy, ProxySettings
from mmgate.gateway.telemetry import Telemetry
from mmgate.http.headers import REQUEST_ID, request_id_from
from mmgate.http.request import Request
from mmgate.http.responses import Response, error_response, json_response, request_error_response
from mmgate.http.server import ServerLimits
from mmgate.http.writer import ResponseWriter
from mmgate.request.urlprobe import UrlProber, UrlProbeSettings
from mmgate.request.urlsizing import UrlSizer
from mmgate.request.view import API_PATHS, Api, RequestView
from mmgate.tokens import PricingConfig

if TYPE_CHECKING:  # imported only when tracing is configured (it loads OpenTelemetry)
    from mmgate.gateway.tracing import Tracing

log = logging.getLogger("mmgate.gateway")
access_log = logging.getLogger("mmgate.access")

RouteHandler = Callable[[Request, ResponseWriter], Awaitable[None]]
Routes = dict[str, tuple[str, RouteHandler]]  # path -> (method, handler)

# ``GET /v1/models/{model}``: a model id may hold a slash (``Qwen/Qwen3-VL-8B-Instruct``), which
# the openai client sends percent-encoded (``Qwen%2FQwen3-VL-8B-Instruct``) and curl users type
# as is; vLLM's route takes both (``{model_name:path}``), so the rest of the path is the id.
MODEL_ROUTE = "/v1/models/{model}"
MODEL_PREFIX = MODEL_ROUTE.split("{", 1)[0]
GET_ROUTES = ("/v1/models", MODEL_ROUTE, "/health")  # on the API port
ADMIN_ROUTES = ("/ready", "/metrics")  # on the API port, or on the admin port when one is set


def route_list() -> list[tuple[str, str]]:
    """(method, path) of every route the gateway serves, as :meth:`Gateway.routes` builds them
    (for ``--help`` and docs; a test holds the two together)."""
    return [("POST", path) for path in ROUTES] + [("GET", path) for path in (*GET_ROUTES, *ADMIN_ROUTES)]


ROUTES: dict[str, Api] = API_PATHS  # every POST route vLLM serves, at vLLM's paths


@dataclass(slots=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8080
    data: DataLayerConfig = field(default_factory=DataLayerConfig)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    control: ControlSettings = field(default_factory=ControlSettings)  # retries, breaker, admission
    max_body_bytes: int = 64 * 1024 * 1024
    body_timeout_s: float = 30.0  # the whole body must arrive within this (slow-loris bodies: 408)
    header_timeout_s: float = 10.0  # the request head must arrive within this (slow-loris heads: 408)
    max_header_bytes: int = 64 * 1024  # request line and headers together (431 beyond)
    keepalive_timeout_s: float = 75.0  # idle client connections are closed after this
    send_timeout_s: float = 60.0  # a client that accepts no response bytes for this long is cut off
    access_log: bool = True
    admin_port: int | None = None  # serve /metrics and /ready there instead (0 picks a free port)
    orchestration: OrchestrationSettings | None = None  # run the disaggregated legs here (not a sidecar)
    url_probe: UrlProbeSettings | None = None  # size URL media by their headers (opt in)

    def server_limits(self) -> ServerLimits:
        return ServerLimits(
            max_body_bytes=self.max_body_bytes,
            max_header_bytes=self.max_header_bytes,
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            keepalive_timeout_s=self.keepalive_timeout_s,
            send_timeout_s=self.send_timeout_s,
            single_valued_headers=PARSED_HEADERS,
        )


class Gateway:
    """Owns the data layer, the request controller, the proxy and the telemetry; :meth:`routes`
    is what it serves."""

    def __init__(
        self,
        settings: GatewaySettings,
        picker: EndpointPicker,
        parse: Parser,
        *,
        clock: Callable[[], float] = time.monotonic,
        keys: KeyStore | None = None,
        tracing: Tracing | None = None,
        flow: FlowSettings | None = None,
        pricing: PricingConfig | None = None,
    ) -> None:
        """``flow``: flow control's settings (``None``: off); ``pricing``: how it prices requests
        for media-aware fairness."""
        self.settings = settings
        self.tracing = tracing
        self.picker = picker
        self.clock = clock
        self.data = DataLayer(settings.data, clock=clock)
        self.telemetry = Telemetry(self.data.registry, clock)
        self.data.register_metrics(self.telemetry.registry)
        sizer = None
        if settings.url_probe is not None:
            sizer = UrlSizer(UrlProber(settings.url_probe, on_outcome=self.telemetry.url_probed, clock=clock))
        gate = None
        if flow is not None:
            registry = self.data.registry

            def metrics_of(name: str) -> MetricsSnapshot | None:
                record = registry.get(name)
                return record.metrics if record is not None else None

            gate = FlowGate(flow, metrics_of, pricing)
            # With discovery by InferencePool, its InferenceObjectives join the config's.
            self.data.follow_objectives(gate.classifier.discovered)
        self.controller = RequestController(
            picker, self.data.registry, settings.control, parse=parse, clock=clock, observer=self.telemetry,
            keys=keys, sizer=sizer, tracer=tracing, flow=gate,
        )  # fmt: skip
        if gate is not None:
            controller = self.controller
            self.data.scraper.on_refresh(lambda record: controller.refreshed(record.name))
            self.telemetry.registry.register(FlowCollector(gate.dispatcher, clock))
        stage_metrics = StageMetrics(self.telemetry.registry) if settings.orchestration is not None else None
        self.proxy = Proxy(
            self.controller, settings.proxy, clock=clock, orchestration=settings.orchestration,
            stage_metrics=stage_metrics,
        )  # fmt: skip
        self.telemetry.inflight_from(lambda: self.controller.inflight)  # read at scrape time
        # Fixed by the config: which optional steps a request takes, read once instead of asked
        # on every request (each ask is a call that answers None when the feature is off).
        self._traced = self.controller.tracing
        self._authenticated = self.controller.keys is not None
        self._client_keyed = self.controller.reads_client
        self._debug_scores = settings.proxy.debug_scores

    @property
    def inflight(self) -> int:
        """Requests holding an admission slot now."""
        return self.controller.inflight

    async def start(self) -> None:
        self.controller.defer_on(asyncio.get_running_loop())  # index hooks after the send
        if self.tracing is not None:
            self.tracing.start()
        await self.proxy.start()
        try:
            await self.data.start()
        except BaseException:
            await self.proxy.stop()
            raise

    async def stop(self) -> None:
        await self.data.stop()
        await self.proxy.stop()
        if self.tracing is not None:  # the last spans go out; the export blocks, so not on the loop
            await asyncio.to_thread(self.tracing.shutdown)

    def routes(self) -> Routes:
        """The API port's routes (``/metrics`` and ``/ready`` too unless an admin port is set)."""
        routes: Routes = {path: ("POST", self._api_handler(api)) for path, api in ROUTES.items()}
        gets = {"/v1/models": self._simple(self.models), MODEL_ROUTE: self._model_route}
        gets["/health"] = self._simple(self.health)
        routes.update({path: ("GET", gets[path]) for path in GET_ROUTES})
        if self.settings.admin_port is None:
            routes.update(self._admin_routes())
        return routes

    def admin_routes(self) -> Routes:
        """``/metrics``, ``/ready`` and ``/health`` alone, for a separate admin port: the fleet's
        state and the gateway's counters need not be reachable by API clients."""
        return {"/health": ("GET", self._simple(self.health)), **self._admin_routes()}

    def _admin_routes(self) -> Routes:
        handlers = {"/ready": self._simple(self.ready), "/metrics": self._simple(self.metrics)}
        return {path: ("GET", handlers[path]) for path in ADMIN_ROUTES}

    def dispatcher(self, routes: Routes) -> Callable[[Request, ResponseWriter], Awaitable[None]]:
        """The server handler for ``routes``: 404 for an unknown path, 405 (with Allow) for a
        known path asked with another method, both OpenAI-shaped. HEAD is served by GET routes."""

        templated = MODEL_ROUTE in routes
        fixed = [path for path in routes if "{" not in path]

        async def dispatch(request: Request, writer: ResponseWriter) -> None:
            route = routes.get(request.path)
            if route is None:
                if not (templated and request.path.startswith(MODEL_PREFIX)):
                    writer.send(not_found(request.method, request.path, fixed))
                    return
                route = routes[MODEL_ROUTE]
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
        # handle itself, its API bound: no coroutine of a wrapper around it on every request.
        return partial(self.handle, api=api)

    @staticmethod
    def _simple(answer: Callable[[], Response]) -> RouteHandler:
        async def handler(_request: Request, writer: ResponseWriter) -> None:
            writer.send(answer())

        return handler

    async def handle(self, request: Request, writer: ResponseWriter, api: Api) -> None:
        received = self.clock()
        headers = request.headers
        request_id = request_id_from(headers)
        controller = self.controller
        trace = controller.trace(headers, api, request.path) if self._traced else None
        flight: Flight | None = None
        view: RequestView | None = None
        forwarded: Forwarded | None = None
        status = 500
        label = ""
        try:
            # Before parsing: a 401 costs nothing.
            identity = controller.authenticate(headers) if self._authenticated else None
            view = controller.parse(request.body, headers, api, trace)
            try:
                flight = controller.open(
                    view,
                    request_id,
                    headers,
                    client=client_key(headers, request.remote) if self._client_keyed else "",
                    debug=self._debug_scores and self.proxy.wants_scores(request),
                    received=received,
                    identity=identity,
                    trace=trace,
                )
            except NoCandidates as exc:
                status = 503
                refusal = {"Retry-After": "1", REQUEST_ID: request_id}
                writer.send(error_response(503, str(exc), code="no_endpoint", headers=refusal))
                return
            try:
                if not controller.admit_now(flight):  # a free slot: no coroutine
                    await controller.admit(flight)
            except Overloaded as exc:
                status = exc.status
                writer.send(
                    error_response(
                        exc.status,
                        exc.message,
                        code=exc.code,
                        headers={"Retry-After": str(exc.retry_after_s), REQUEST_ID: request_id},
                    )
                )
                return
            try:
                forwarded = await self.proxy.forward(request, writer, flight)
            finally:
                controller.leave(flight)
        except RequestError as exc:
            status = exc.status
            writer.send(request_error_response(exc, headers={REQUEST_ID: request_id}))
        except asyncio.CancelledError:  # the client went away; the upstream request was closed
            label = "client_closed"
            raise
        finally:
            if forwarded is not None:
                status, label = forwarded.status, forwarded.label
            self.record(api, view, flight, label or str(status), received, request_id, trace)

    def record(
        self, api: Api, view: RequestView | None, flight: Flight | None, status: str, received: float,
        request_id: str, trace: RequestTrace | None = None,
    ) -> None:  # fmt: skip
        """One finished request into the metrics, the access log and its trace (every transport
        calls it)."""
        model = view.model if view is not None else "-"
        endpoint = flight.endpoint if flight is not None else ""
        first_byte_s = flight.first_byte_s if flight is not None else None
        duration = self.clock() - received
        self.telemetry.request_done(model, status, endpoint, duration, first_byte_s)
        if trace is not None:
            trace.end(status)
        if not self.settings.access_log:
            return
        fields: dict[str, Any] = {
            "request_id": request_id,
            "api": api.value,
            "model": model,
            "status": status,
            "endpoint": endpoint or None,
            "attempts": flight.attempts if flight is not None else 0,
            "duration_ms": round(duration * 1000, 3),
        }
        if view is not None:
            fields["stream"] = view.stream
            fields["media"] = view.media_counts
        if flight is not None and flight.decision is not None:
            fields["request_tokens"] = flight.decision.request_tokens
            fields["decision_us"] = round(flight.decision_s * 1e6, 1)
            if flight.decision.encode is not None:
                fields["encode"], fields["encode_reason"] = flight.decision.encode
            if flight.decision.encode_costs is not None:
                local, tier = flight.decision.encode_costs
                fields["encode_local_ms"] = round(local * 1000, 3)
                fields["encode_tier_ms"] = round(tier * 1000, 3) if math.isfinite(tier) else None
            if flight.decision.predicted_ttft_s is not None:
                fields["predicted_ttft_ms"] = round(flight.decision.predicted_ttft_s * 1000, 3)
        if flight is not None and flight.identity is not None:  # the tenant and key id, never the key
            fields["tenant"] = flight.identity.tenant
            fields["key_id"] = flight.identity.key_id
        if flight is not None and flight.flow is not None:
            fields["flow"] = flight.flow.fairness_id
            fields["priority"] = flight.flow.priority
            fields["held_ms"] = round(flight.held_s * 1000, 3)
        if first_byte_s is not None:
            fields["ttfb_ms"] = round(first_byte_s * 1000, 3)
        if flight is not None and flight.errors:
            fields["errors"] = flight.errors[-5:]
        access_log.info("request", extra={"fields": fields})

    def models(self) -> Response:
        return json_response({"object": "list", "data": self.data.model_cards()})

    def model(self, name: str) -> Response:
        """``GET /v1/models/{model}`` (``client.models.retrieve``): the model's card, or a 404
        naming ``model`` (with the id it probably meant, e.g. in another case)."""
        cards = self.data.model_cards()
        for card in cards:
            if card.get("id") == name:
                return json_response(card)
        ids = [str(card.get("id")) for card in cards]
        error = RequestError(
            f"The model '{name}' does not exist here{did_you_mean(name, ids)}; served: {', '.join(ids[:20])}",
            param="model",
            status=404,
            code="model_not_found",
        )
        return request_error_response(error)

    async def _model_route(self, request: Request, writer: ResponseWriter) -> None:
        writer.send(self.model(model_in_path(request.path)))

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
        body: dict[str, object] = {"ready": ready, "endpoints": endpoints}
        if not self.data.kv_events_ingesting():
            body["kv_events"] = "a KV-event reader stopped; see mmgate_kv_events_ingesting"
        return json_response(body, status=200 if ready else 503)

    def metrics(self) -> Response:
        return Response(200, generate_latest(self.telemetry.registry), CONTENT_TYPE_LATEST)


def model_in_path(path: str) -> str:
    """The model id of a ``/v1/models/{model}`` path, percent-decoded (``%2F`` is a slash)."""
    return unquote(path.removeprefix(MODEL_PREFIX))


def not_found(method: str, path: str, known: Iterable[str]) -> Response:
    """404 for a path no route serves, naming the route it was probably meant to be."""
    hint = did_you_mean(path, known)
    return error_response(404, f"Not Found: {method} {path}{hint}", code="unknown_route")
