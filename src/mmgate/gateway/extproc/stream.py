"""One request through Envoy's ext_proc stream, in the body mode the proxy configured.

``FULL_DUPLEX_STREAMED`` (the endpoint-picker protocol, as llm-d's router runs it): Envoy sends
the request headers, then body chunks without waiting for answers; mmgate buffers the body to its
end (bounded by the same limit as the HTTP gateway), asks the request controller where it goes,
and answers in order — the headers response (destination, routing headers, route cache cleared),
the body streamed back in chunks, then the trailers.

``BUFFERED`` request body: Envoy waits for the headers answer (an empty one: the routing is not
known yet), then sends the whole body in one message; the body answer carries the routing headers,
the destination metadata and — only when mmgate changed the body (media uuids) — the new body.
Envoy has not sent the headers upstream yet, so header mutations in the body answer apply.

Which mode is on comes from the stream's first message (``protocol_config``, sent by Envoy 1.34
and later); without it, ``FULL_DUPLEX_STREAMED`` is assumed.

The destination is one endpoint unless asked for more (``max_endpoints``, or the picker's
``maxNumOfEndpoints``): a list is only understood by a proxy that walks it (Envoy's
``override_host``); llm-d's ``ORIGINAL_DST`` cluster reads the header as one address.

On the way back Envoy reports the response headers (and which endpoint served, after its own
retries), then the body — echoed unchanged in ``FULL_DUPLEX_STREAMED``, acknowledged without a
body in ``STREAMED`` — while mmgate notes the first byte and the usage for load and affinity
bookkeeping.

Everything the request controller refuses becomes an ``ImmediateResponse`` with the same
OpenAI-shaped body the HTTP gateway would send.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from google.protobuf.message import DecodeError

from mmgate.control.admission import Overloaded, client_key
from mmgate.control.controller import Attempt, Flight, NoCandidates, RequestTrace
from mmgate.errors import RequestError
from mmgate.gateway.extproc import messages, wire
from mmgate.gateway.server import MODEL_PREFIX, ROUTES, Gateway, model_in_path, not_found
from mmgate.gateway.usage import UsageMeter
from mmgate.http.headers import (
    REQUEST_ID,
    RESPONSE_ENDPOINT,
    RESPONSE_TOKENS,
    TRACE_CONTEXT_HEADERS,
    is_routing_header,
    request_id_from,
)
from mmgate.http.request import Headers
from mmgate.http.responses import Response, error_response, request_error_response
from mmgate.request.view import Api, RequestView

log = logging.getLogger("mmgate.extproc")

Buffer = bytes | memoryview
FULL_DUPLEX = pm.ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = pm.ProcessingMode.BUFFERED
HAND_READ_HEADERS = not (wire.__file__ or "").endswith(".py")
"""Headers messages read by :func:`.wire.headers_message` when it is compiled; run as Python
source, the protobuf runtime's C parser is the cheaper of the two."""


class Malformed(ValueError):
    """Bytes that do not parse as the message they should be."""


class RequestStream:
    """Follows one HTTP request on one ext_proc gRPC stream; :meth:`on_message` returns the
    messages to send back (``None`` when the request waits in the admission queue: then
    :meth:`admitted` returns them), :meth:`close` ends the bookkeeping however the stream ended.

    Synchronous but for that wait: every message but the request's last body chunk is answered
    without the event loop, and that one too when a slot is free — a coroutine per message was a
    measurable share of the picker's cost."""

    def __init__(self, gateway: Gateway, max_endpoints: int | None = None) -> None:
        self.gateway = gateway
        self.controller = gateway.controller
        self.max_endpoints = max_endpoints
        self.request_mode: int = FULL_DUPLEX  # until the first message's protocol_config says
        self.response_mode: int = FULL_DUPLEX
        self.headers: Headers | None = None
        self.method = ""
        self.path = ""
        self.subset: list[str] | None = None
        self._chunks: list[Buffer] = []  # the request body as it came, joined at its end
        self._size = 0
        self.api: Api | None = None
        self.view: RequestView | None = None
        self.flight: Flight | None = None
        self.attempt: Attempt | None = None
        self.request_id = ""
        self.received = gateway.clock()
        self.status = 0  # what the client got, for the request log
        self.label = ""
        self.upstream_status = 0
        self.first_byte = False
        self.meter: UsageMeter | None = None  # the answer's output, when flow control charges it
        self.sent = 0  # response body bytes passed on to the client
        self.trace: RequestTrace | None = None  # tracing on: this request's trace
        self.done = False
        self._whole = b""  # the client's body, until the routing answer says whether it changed

    # -- the request ----------------------------------------------------------------------------

    def on_serialized(self, raw: Buffer) -> list[messages.Answer] | None:
        """:meth:`on_message` for a ``ProcessingRequest``'s wire bytes (:class:`Malformed` if
        they are not one)."""
        if HAND_READ_HEADERS:
            read = wire.headers_message(raw)
            if read is not None:
                if read.request:
                    return self._request_headers(read.pairs, read.end, read.modes, None)
                return self._response_headers(read.pairs, read.end, messages.served(None, read.upstream))
        try:
            message = ep.ProcessingRequest.FromString(raw)
        except DecodeError:
            raise Malformed("not a ProcessingRequest") from None
        return self.on_message(message)

    def on_message(self, message: ep.ProcessingRequest) -> list[messages.Answer] | None:
        """The answers to ``message``."""
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            config = message.protocol_config if message.HasField("protocol_config") else None
            return self._request_headers(
                messages.header_pairs(message.request_headers),
                message.request_headers.end_of_stream,
                None if config is None else (config.request_body_mode, config.response_body_mode),
                messages.subset_hint(message.metadata_context),
            )
        if kind == "request_body":
            body = message.request_body
            return self.request_chunk([body.body], body.end_of_stream)
        if kind == "request_trailers":
            return [messages.request_trailers()]
        if kind == "response_headers":
            return self._response_headers(
                messages.header_pairs(message.response_headers),
                message.response_headers.end_of_stream,
                messages.served_endpoint(message),
            )
        if kind == "response_body":
            body = message.response_body
            return self.response_chunk([body.body], body.end_of_stream)
        if kind == "response_trailers":
            self._end(ok=True)
            return [messages.response_trailers()]
        return []

    def _request_headers(
        self,
        pairs: list[tuple[str, str]],
        end: bool,
        modes: tuple[int, int] | None,
        subset: list[str] | None,
    ) -> list[messages.Answer]:
        if modes is not None:  # the stream's first message says how Envoy sends the bodies
            self.request_mode, self.response_mode = modes
        method = path = None
        plain = []
        for name, value in pairs:
            if not name.startswith(":"):
                plain.append((name, value))
            elif name == ":method" and method is None:
                method = value
            elif name == ":path" and path is None:
                path = value
        self.method = method or ""
        self.path = (path or "").split("?", 1)[0]
        self.headers = Headers(plain)
        self.request_id = request_id_from(self.headers)
        self.subset = subset
        self.api = ROUTES.get(self.path)
        if self.api is not None:
            self.trace = self.controller.trace(self.headers, self.api, self.path)
        if end:  # no body: a GET, or a bodiless POST
            return [self._bodiless()]
        if self.request_mode != FULL_DUPLEX:  # Envoy waits for this answer before the body
            return [messages.continue_request_headers()]
        return []

    def _bodiless(self) -> ep.ProcessingResponse:
        if self.path == "/v1/models" and self.method in ("GET", "HEAD"):
            return self._immediate(self.gateway.models(), "mmgate_models")
        if self.path.startswith(MODEL_PREFIX) and self.method in ("GET", "HEAD"):
            return self._immediate(self.gateway.model(model_in_path(self.path)), "mmgate_models")
        if self.path == "/health" and self.method in ("GET", "HEAD"):
            return self._immediate(self.gateway.health(), "mmgate_health")
        if self.api is not None:
            return self._refuse(RequestError("the request has no body", param="body"))
        return self._not_found()

    def _not_found(self) -> ep.ProcessingResponse:
        known = [*ROUTES, "/v1/models", "/health"]
        return self._immediate(not_found(self.method, self.path, known), "mmgate_not_found")

    def request_chunk(self, chunk: Sequence[Buffer], end: bool) -> list[messages.Answer] | None:
        """A request body message (:meth:`on_message` for one the transport read without the
        protobuf runtime: ``chunk`` is its consecutive parts, views of the bytes received)."""
        if self.done:
            return []
        for part in chunk:
            self._chunks.append(part)
            self._size += len(part)
        limit = self.gateway.settings.max_body_bytes
        if self._size > limit:
            self._chunks.clear()
            message = f"the request body is larger than the gateway's limit of {limit} bytes"
            return [self._immediate(error_response(413, message, code="body_too_large"), "mmgate_too_large")]
        if not end:
            return []
        return self._route()

    def _route(self) -> list[messages.Answer] | None:
        assert self.headers is not None
        if self.api is None:
            return [self._not_found()]
        controller = self.controller
        chunks = self._chunks
        whole = bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)  # one copy (none of bytes)
        chunks.clear()
        try:
            self.view = controller.parse(whole, self.headers, self.api, self.trace)
            self.flight = controller.open(
                self.view,
                self.request_id,
                self.headers,
                client=client_key(self.headers, ""),
                received=self.received,
                subset=self.subset,
                trace=self.trace,
            )
        except RequestError as exc:
            return [self._refuse(exc)]
        except NoCandidates as exc:
            refusal = error_response(503, str(exc), code="no_endpoint", headers={"Retry-After": "1"})
            return [self._immediate(refusal, "mmgate_no_endpoint")]
        self._whole = whole
        try:
            if not controller.admit_now(self.flight):
                return None  # the caller awaits admitted()
            return self._decided()
        except Overloaded as exc:
            return [self._shed(exc)]
        except RequestError as exc:  # found when deciding (a modality the model does not take)
            return [self._refuse(exc)]

    async def admitted(self) -> list[messages.Answer]:
        """The routing answer of a request that had to wait for an admission slot."""
        assert self.flight is not None
        try:
            await self.controller.admit(self.flight)
            return self._decided()
        except Overloaded as exc:
            return [self._shed(exc)]
        except RequestError as exc:
            return [self._refuse(exc)]

    def _shed(self, exc: Overloaded) -> ep.ProcessingResponse:
        headers = {"Retry-After": str(exc.retry_after_s)}
        shed = error_response(exc.status, exc.message, code=exc.code, headers=headers)
        return self._immediate(shed, "mmgate_overloaded")

    def _decided(self) -> list[messages.Answer]:
        controller = self.controller
        assert self.flight is not None and self.view is not None and self.headers is not None
        whole, self._whole = self._whole, b""
        body = self.view.body  # with media uuids when the gateway writes them (as pieces)
        attempt = controller.decide(self.flight)
        if attempt is None:
            message = f"no endpoint can take the request: {self.flight.last_error}"
            refusal = error_response(503, message, code="no_endpoint", headers={"Retry-After": "1"})
            return [self._immediate(refusal, "mmgate_no_endpoint")]
        self.attempt = attempt
        controller.started(attempt)
        destination = ",".join(controller.destinations(attempt, self.max_endpoints))
        remove = [name for name in self.headers if is_routing_header(name)]
        extra = [
            *attempt.headers.items(),
            (REQUEST_ID, self.request_id),
            ("content-length", str(len(body))),
        ]
        if attempt.propagation:  # tracing on: the attempt's trace context replaces the client's
            extra.extend(attempt.propagation)
            ours = {name for name, _ in attempt.propagation}
            remove.extend(n for n in TRACE_CONTEXT_HEADERS if n in self.headers and n not in ours)
        if self.request_mode != FULL_DUPLEX:  # one answer; the body only when it changed
            return [messages.route_body(destination, extra, remove, None if body is whole else body)]
        out: list[messages.Answer] = [wire.routing(wire.REQUEST_HEADERS_OUT, destination, extra, remove)]
        out.extend(wire.request_body(body, end=True))
        return out

    # -- the response ---------------------------------------------------------------------------

    def _response_headers(
        self, pairs: list[tuple[str, str]], end: bool, served: str | None
    ) -> list[messages.Answer]:
        status = next((v for k, v in pairs if k == ":status"), "0")
        self.upstream_status = int(status) if status.isdigit() else 0
        if self.attempt is not None and served is not None and served != self.attempt.endpoint:
            # Envoy walked the fallback list: the pod that served carries the load from now on.
            moved = self.controller.moved(self.attempt, served, "the proxy retried on another endpoint")
            if moved is not None:
                self.attempt = moved
                self.controller.started(moved)
        mine: list[tuple[str, str]] = []
        if self.attempt is not None:
            decision = self.attempt.decision
            mine = [(RESPONSE_ENDPOINT, decision.endpoint), (RESPONSE_TOKENS, str(decision.request_tokens))]
        if end:
            self._first_byte()
            self._end(ok=True)
        return [wire.response_headers(mine)]

    def response_chunk(self, chunk: Sequence[Buffer], end: bool) -> list[messages.Answer]:
        """A response body message (as :meth:`request_chunk`)."""
        self._first_byte()
        meter = self.meter
        for part in chunk:
            self.sent += len(part)
            if meter is not None:
                meter.feed(bytes(part))
        out: list[messages.Answer]
        if self.response_mode == FULL_DUPLEX:  # what mmgate does not send back, the client never gets
            out = list(wire.response_body(chunk, end=end))
        else:  # STREAMED or BUFFERED: an empty answer leaves the chunk as it is
            out = [messages.continue_response_body()]
        if end:
            self._end(ok=True)
        return out

    def _first_byte(self) -> None:
        if not self.first_byte and self.attempt is not None:
            self.first_byte = True
            self.controller.first_byte(self.attempt, self.upstream_status)
            flight = self.attempt.flight
            if flight.output_estimate:
                self.meter = UsageMeter.of(flight.view)

    # -- the end --------------------------------------------------------------------------------

    def _refuse(self, exc: RequestError) -> ep.ProcessingResponse:
        return self._immediate(request_error_response(exc), f"mmgate_{exc.code or 'bad_request'}")

    def _immediate(self, response: Response, details: str) -> ep.ProcessingResponse:
        response.headers.append((REQUEST_ID, self.request_id or ""))
        self.status = response.status
        self._finish_bookkeeping()
        return messages.immediate(response, details)

    def _end(self, *, ok: bool) -> None:
        if self.done:
            return
        attempt = self.attempt
        if attempt is not None:
            if self.meter is not None and (usage := self.meter.usage()) is not None:
                self.controller.usage(attempt, usage)
            self.controller.finished(attempt, ok=ok, sent=self.sent)
        self.status = self.upstream_status
        if not ok:
            self.label = "client_closed" if self.first_byte else "aborted"
        self._finish_bookkeeping()

    def close(self) -> None:
        """The gRPC stream ended: a request still open was aborted (client gone, Envoy reset)."""
        if not self.done:
            self._end(ok=False)

    def _finish_bookkeeping(self) -> None:
        if self.done:
            return
        self.done = True
        if self.flight is not None:
            self.controller.leave(self.flight)
        if self.api is not None:
            status = self.label or str(self.status or 500)
            self.gateway.record(
                self.api, self.view, self.flight, status, self.received, self.request_id, self.trace
            )
