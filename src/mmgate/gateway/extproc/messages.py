"""Building and reading Envoy ext_proc messages (``envoy.service.ext_proc.v3``).

Header values travel in ``raw_value`` (bytes): Envoy fills it and reads it first, and bytes keep
non-ASCII header values intact both ways.

Answers that carry a body are written as protobuf wire bytes by hand (:mod:`.wire`;
:data:`Answer` is a message or its serialized form). Protobuf's merge rule (a message's
serialized fields may be concatenated; the same embedded field twice merges) lets the small
routing part of a ``BUFFERED`` body answer be serialized by the runtime and the body appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from mmgate.gateway.extproc import wire
from mmgate.gateway.extproc.wire import Wire
from mmgate.http.responses import Response
from mmgate.request.pieces import Body

DESTINATION = wire.DESTINATION
SERVED = "x-gateway-destination-endpoint-served"
SUBSET = "x-gateway-destination-endpoint-subset"
LB_NAMESPACE = wire.LB_NAMESPACE
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
FILTER_NAME = wire.ATTRIBUTES_FILTER
UPSTREAM_ADDRESS = wire.UPSTREAM_ADDRESS
Answer: TypeAlias = "ep.ProcessingResponse | bytes | Wire"
"""A message to send back: built, or already serialized (the body-carrying ones, as parts)."""


def header_pairs(headers: ep.HttpHeaders) -> list[tuple[str, str]]:
    """The header list of a headers message, pseudo-headers (``:path``...) included."""
    out = []
    for h in headers.headers.headers:
        value = h.raw_value.decode("latin-1") if h.raw_value else h.value
        out.append((h.key, value))
    return out


def _metadata_value(metadata: base_pb2.Metadata, namespace: str, key: str) -> struct_pb2.Value | None:
    fields = metadata.filter_metadata.get(namespace)
    if fields is None or key not in fields.fields:
        return None
    return fields.fields[key]


def subset_hint(metadata: base_pb2.Metadata) -> list[str] | None:
    """The endpoints Envoy allows (filter metadata ``envoy.lb.subset_hint``), or ``None``."""
    value = _metadata_value(metadata, SUBSET_NAMESPACE, SUBSET)
    if value is None:
        return None
    if value.HasField("list_value"):
        return [v.string_value for v in value.list_value.values if v.string_value]
    return [s.strip() for s in value.string_value.split(",") if s.strip()]


def served_endpoint(message: ep.ProcessingRequest) -> str | None:
    """The endpoint that actually served the request (after the proxy's retries): the GIE
    protocol's ``x-gateway-destination-endpoint-served`` in the ``envoy.lb`` metadata when the
    proxy reports it, else the ``upstream.address`` attribute plain Envoy sends when the filter
    asks for it (``response_attributes``)."""
    value = _metadata_value(message.metadata_context, LB_NAMESPACE, SERVED)
    attributes = message.attributes.get(FILTER_NAME)
    address = None
    if attributes is not None and UPSTREAM_ADDRESS in attributes.fields:
        address = str(attributes.fields[UPSTREAM_ADDRESS].string_value)
    return served(None if value is None else str(value.string_value), address)


def served(reported: str | None, address: str | None) -> str | None:
    """The served endpoint from the protocol's report (``reported``) if it names one, else
    from Envoy's ``upstream.address`` attribute (``address``)."""
    if reported is not None and reported.strip():
        return reported.strip()
    if address is not None:
        return address.strip() or None
    return None


def _mutation(set_headers: Iterable[tuple[str, str]], remove: Iterable[str] = ()) -> ep.HeaderMutation:
    return ep.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode("latin-1")),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
            for k, v in set_headers
        ],
        remove_headers=list(remove),
    )


def route_body(
    destination: str, set_headers: Sequence[tuple[str, str]], remove: Sequence[str], body: Body | None
) -> Answer:
    """The routing answer (:func:`.wire.routing`) to a ``BUFFERED`` request body (Envoy still
    holds the headers, so their mutations apply): ``body`` replaces the client's when given (as
    views of its pieces), else the client's body goes as it came, without crossing the picker
    again."""
    routing = wire.routing(wire.REQUEST_BODY_OUT, destination, set_headers, remove)
    if body is None:
        return routing
    pieces = [body] if isinstance(body, bytes) else list(body)
    leaf = [wire.delimited(wire.WHOLE_BODY, len(body)), *pieces]
    path = (wire.REQUEST_BODY_OUT, wire.COMMON, wire.BODY_MUTATION)
    return wire.nested(path, leaf, before=routing)


# The answers that never vary, serialized once.
_CONTINUE_REQUEST_HEADERS: bytes = ep.ProcessingResponse(
    request_headers=ep.HeadersResponse(response=ep.CommonResponse())
).SerializeToString()
_CONTINUE_RESPONSE_BODY: bytes = ep.ProcessingResponse(
    response_body=ep.BodyResponse(response=ep.CommonResponse())
).SerializeToString()
_REQUEST_TRAILERS: bytes = ep.ProcessingResponse(request_trailers=ep.TrailersResponse()).SerializeToString()
_RESPONSE_TRAILERS: bytes = ep.ProcessingResponse(response_trailers=ep.TrailersResponse()).SerializeToString()


def continue_request_headers() -> bytes:
    return _CONTINUE_REQUEST_HEADERS


def continue_response_body() -> bytes:
    """The answer to a ``STREAMED`` (or ``BUFFERED``) response body chunk: pass it on as it is."""
    return _CONTINUE_RESPONSE_BODY


def request_trailers() -> bytes:
    return _REQUEST_TRAILERS


def response_trailers() -> bytes:
    return _RESPONSE_TRAILERS


def immediate(response: Response, details: str) -> ep.ProcessingResponse:
    """Envoy answers the client itself with ``response`` (an OpenAI-shaped error, or a small
    answer such as ``/v1/models``); the request never reaches an upstream."""
    return ep.ProcessingResponse(
        immediate_response=ep.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=response.status),
            headers=_mutation(response.all_headers()),
            body=response.body,
            details=details,
        )
    )
