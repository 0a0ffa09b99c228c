"""OpenTelemetry traces of the gateway's requests (opt in: ``mmgate.tracing`` and the ``tracing`` extra).

This module is imported only when tracing is configured, so a gateway without it never loads
OpenTelemetry and its requests make no span objects (``tests/gateway/test_tracing.py`` checks
both). With it, every request gets a server span, a child of the client's trace when the request
carries a W3C Trace Context ``traceparent`` (https://www.w3.org/TR/trace-context/, its
``tracestate`` kept), and children for the controller's steps::

    POST /v1/chat/completions       SERVER  model, status
    ├── parse                               api, media items per modality
    ├── decide                              endpoint, profile, tokens priced, stage pods
    └── upstream                    CLIENT  one per attempt: endpoint, status, bytes
        ├── first_byte                      from sending to the first body byte
        └── relay                           from the first byte to the last (bytes, status)

Each attempt sends a ``traceparent`` naming its ``upstream`` span in place of the client's, so
the model server's own spans (vLLM with ``--otlp-traces-endpoint``) hang under the attempt that
reached it; the encode and prefill legs of gateway-run disaggregation carry the same header. A
failed step sets its span's status to ERROR; the server span follows OpenTelemetry's HTTP
conventions (ERROR for a 5xx, or a stream that did not end; a 4xx is the client's and stays
unset, with ``error.type`` naming it).

Spans are exported over OTLP/HTTP (protobuf) by the SDK's batch processor, in its own thread: the
event loop only creates and ends spans. Attributes are counts, names and sizes read from the
request view and the decision, never bodies, media payloads, headers or keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from time import time_ns  # the SDK's span clock
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from mmgate.control.decision import Decision
from mmgate.errors import RequestError
from mmgate.request.view import Api, RequestView

TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for spans
DEFAULT_SERVICE_NAME = "mmgate"

# The stage pods a disaggregated decision names (llm-d's routing headers), as span attributes.
_STAGE_HEADERS = (
    ("x-prefiller-host-port", "mmgate.prefill_endpoint"),
    ("x-encoder-hosts-ports", "mmgate.encode_endpoints"),
)


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """Where spans go and which are kept. ``None`` leaves a setting to the SDK's standard
    environment variables (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER`` and ``_ARG``), then to their defaults
    (``http://localhost:4318``, ``mmgate``, every trace)."""

    endpoint: str | None = None  # the collector's OTLP/HTTP base URL, or the full /v1/traces URL
    service_name: str | None = None
    sample_ratio: float | None = None  # of new traces; a client's sampled flag is followed


def traces_url(endpoint: str) -> str:
    """The traces URL for a collector's base URL (``http://collector:4318`` → ``.../v1/traces``),
    as the SDK does for ``OTEL_EXPORTER_OTLP_ENDPOINT``; a URL with a path is kept as given (the
    config check refused anything but an http(s) URL with a host)."""
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + TRACES_PATH
    return endpoint


class Tracing:
    """The controller's :class:`~mmgate.control.controller.RequestTracer` over the OpenTelemetry
    SDK. The provider (and the exporter's thread) is made by :meth:`start`, in the process that
    serves: ``--workers`` builds gateways before forking."""

    def __init__(self, settings: TracingSettings) -> None:
        self.settings = settings
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer = trace.NoOpTracer()
        self._propagator = TraceContextTextMapPropagator()

    def start(self) -> None:
        if self._provider is not None:
            return
        s = self.settings
        name = s.service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
        sampler: Sampler | None = None
        if s.sample_ratio is not None:
            sampler = ParentBased(TraceIdRatioBased(s.sample_ratio))
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}), sampler=sampler)
        exporter = OTLPSpanExporter(endpoint=traces_url(s.endpoint) if s.endpoint is not None else None)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        self._provider = provider
        self._tracer = provider.get_tracer("mmgate.gateway")

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every ended span now (blocking; call it off the event loop)."""
        return self._provider.force_flush(int(timeout_s * 1000)) if self._provider is not None else True

    def shutdown(self) -> None:
        """Export what is left and stop the exporter (blocking; call it off the event loop)."""
        provider, self._provider = self._provider, None
        self._tracer = trace.NoOpTracer()
        if provider is not None:
            provider.shutdown()

    def begin(self, headers: Mapping[str, str], api: Api, path: str) -> RequestSpans:
        parent = self._propagator.extract(headers)
        return RequestSpans(self._tracer, self._propagator, parent, api, path or "/")


class RequestSpans:
    """One request's spans (the controller's :class:`~mmgate.control.controller.RequestTrace`).
    An attempt's span stays open after a failure before its first byte until the controller
    says why (:meth:`failed`), the next attempt starts, or the request ends.

    A request the sampler dropped makes no child spans: its attempts carry the request span's
    context (sampled flag off), which is all a pod needs to agree. Attributes are handed over when
    a span starts wherever they are known by then: the SDK's per-attribute calls cost more."""

    __slots__ = (
        "_context",
        "_first_byte",
        "_propagator",
        "_recording",
        "_relay",
        "_root",
        "_tracer",
        "_upstream",
    )

    def __init__(
        self,
        tracer: trace.Tracer,
        propagator: TraceContextTextMapPropagator,
        parent: Context,
        api: Api,
        path: str,
    ) -> None:
        self._tracer = tracer
        self._propagator = propagator
        self._root = tracer.start_span(
            f"POST {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": "POST",
                "http.route": path,
                "url.path": path,
                "mmgate.api": api.value,
            },
        )
        self._recording = self._root.is_recording()
        self._context = trace.set_span_in_context(self._root)
        self._upstream: Span | None = None
        self._first_byte: Span | None = None
        self._relay: Span | None = None

    def _step(self, name: str, seconds: float, attributes: dict[str, AttributeValue]) -> Span:
        """A child of the request span for a step that just took ``seconds``."""
        start = time_ns() - int(seconds * 1e9)
        return self._tracer.start_span(name, context=self._context, start_time=start, attributes=attributes)

    def parsed(self, view: RequestView | None, seconds: float, error: RequestError | None) -> None:
        if not self._recording:
            return
        attributes: dict[str, AttributeValue] = {}
        if view is not None:
            if view.model:
                self._root.set_attribute("gen_ai.request.model", view.model)
            self._root.set_attribute("mmgate.stream", view.stream)
            for modality, count in view.media_counts.items():
                attributes[f"mmgate.media.{modality}"] = count
        span = self._step("parse", seconds, attributes)
        if error is not None:
            _refused(span, error)
        span.end()

    def decided(self, decision: Decision, seconds: float, candidates: int) -> None:
        if not self._recording:
            return
        attributes: dict[str, AttributeValue] = {
            "mmgate.endpoint": decision.endpoint,
            "mmgate.candidates": candidates,
            "mmgate.request_tokens": decision.request_tokens,
        }
        if decision.profile:
            attributes["mmgate.profile"] = decision.profile
        for modality, tokens in decision.tokens_by_modality.items():
            attributes[f"mmgate.tokens.{modality}"] = tokens
        items = sum(decision.encoder_items.values())
        if items:
            attributes["mmgate.media_items"] = items
            attributes["mmgate.encoder_cache_hits"] = sum(decision.encoder_hits.values())
        if decision.prefix_match is not None:
            attributes["mmgate.prefix_match"] = decision.prefix_match
        for header, attribute in _STAGE_HEADERS:
            value = decision.headers.get(header)
            if value:
                attributes[attribute] = value
        self._step("decide", seconds, attributes).end()

    def undecided(self, reason: str) -> None:
        if not self._recording:
            return
        span = self._step("decide", 0.0, {})
        span.set_status(Status(StatusCode.ERROR, reason))
        span.end()

    def sending(self, endpoint: str, attempt: int) -> list[tuple[str, str]]:
        carrier: dict[str, str] = {}
        if not self._recording:
            self._propagator.inject(carrier, context=self._context)
            return list(carrier.items())
        self._close_attempt()
        host, _, port = endpoint.rpartition(":")
        attributes: dict[str, AttributeValue] = {
            "server.address": host or endpoint,
            "mmgate.attempt": attempt,
        }
        if port.isdigit():
            attributes["server.port"] = int(port)
        upstream = self._tracer.start_span(
            "upstream", context=self._context, kind=SpanKind.CLIENT, attributes=attributes
        )
        context = trace.set_span_in_context(upstream)
        self._upstream = upstream
        self._first_byte = self._tracer.start_span("first_byte", context=context)
        self._propagator.inject(carrier, context=context)
        return list(carrier.items())

    def first_byte(self, status: int) -> None:
        if self._first_byte is not None:
            self._first_byte.end()
            self._first_byte = None
        upstream = self._upstream
        if upstream is None:
            return
        upstream.set_attribute("http.response.status_code", status)
        if status >= 500:
            upstream.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
        self._relay = self._tracer.start_span(
            "relay",
            context=trace.set_span_in_context(upstream),
            attributes={"http.response.status_code": status},
        )

    def broke(self, detail: str) -> None:
        if self._relay is not None:
            self._relay.set_status(Status(StatusCode.ERROR, f"the upstream stream broke: {detail}"))

    def attempt_done(self, ok: bool, sent: int) -> None:
        relay = self._relay
        if relay is None:  # no first byte: the span waits for the reason (failed) or the next step
            if self._first_byte is not None and not ok:
                self._first_byte.set_status(Status(StatusCode.ERROR, "no first byte"))
            return
        self._relay = None
        relay.set_attribute("mmgate.bytes_sent", sent)
        if not ok:
            relay.set_status(Status(StatusCode.ERROR, "the response did not reach its end"))
        relay.end()
        if self._upstream is not None:
            self._upstream.set_attribute("mmgate.bytes_sent", sent)
            if not ok:
                self._upstream.set_status(Status(StatusCode.ERROR, "the response did not reach its end"))
        self._close_attempt()

    def failed(self, endpoint: str, reason: str, detail: str) -> None:
        if self._upstream is not None:
            self._upstream.set_attribute("error.type", reason)
            self._upstream.set_status(Status(StatusCode.ERROR, detail))
        self._close_attempt()

    def end(self, status: str) -> None:
        root = self._root
        if not self._recording:
            root.end()
            return
        self._close_attempt()
        if status.isdigit():
            code = int(status)
            root.set_attribute("http.response.status_code", code)
            if code >= 400:
                root.set_attribute("error.type", status)
            if code >= 500:
                root.set_status(Status(StatusCode.ERROR))
        else:  # aborted (the upstream broke the stream), client_closed
            root.set_attribute("error.type", status)
            root.set_status(Status(StatusCode.ERROR, status))
        root.end()

    def _close_attempt(self) -> None:
        """End the current attempt's spans that are still open."""
        for span in (self._relay, self._first_byte, self._upstream):
            if span is not None:
                span.end()
        self._relay = self._first_byte = self._upstream = None


def _refused(span: Span, error: RequestError) -> None:
    """A client mistake on ``span``: its status and field, not its message (it may quote input)."""
    span.set_attribute("error.type", error.code or error.type)
    if error.param:
        span.set_attribute("mmgate.error.param", error.param)
    span.set_status(Status(StatusCode.ERROR, f"HTTP {error.status}"))
