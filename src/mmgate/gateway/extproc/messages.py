"""Building and reading Envoy ext_proc messages (``envoy.service.ext_proc.v3``).

Header values travel in ``raw_value`` (bytes): Envoy fills it and reads it first, and bytes keep
non-ASCII header values intact both ways.

Answers that carry a body are written as protobuf wire bytes by hand (:data:`Answer` is a message
or its serialized form): building them as messages copied the body once per nesting level, and
the protobuf runtime's copies of a megabyte field cost about a millisecond each — 10 ms for one
three-image body, more than everything else the picker does. By hand, the body is copied once,
into the frame that carries it. Protobuf's merge rule (a message's serialized fields may be
concatenated; the same embedded field twice merges) lets the small routing part be serialized by
the runtime and the body appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from mmgate.http.responses import Response
from mmgate.request.pieces import Body

DESTINATION = "x-gateway-destination-endpoint"
SERVED = "x-gateway-destination-endpoint-served"
SUBSET = "x-gateway-destination-endpoint-subset"
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
FILTER_NAME = "envoy.filters.http.ext_proc"
UPSTREAM_ADDRESS = "upstream.address"
MAX_CHUNK = 62_000  # body chunks sent back to Envoy stay under this (llm-d's EPP does the same)

Buffer: TypeAlias = "bytes | memoryview"
Wire: TypeAlias = "list[bytes | memoryview]"
"""A serialized message as consecutive parts (a body-carrying answer: its few bytes of keys and
lengths, then views of the body)."""
Answer: TypeAlias = "ep.ProcessingResponse | bytes | Wire"
"""A message to send back: built, or already serialized (the body-carrying ones, as parts)."""


def _number(message: type, field: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[field].number)  # type: ignore[attr-defined]


_REQUEST_BODY = _number(ep.ProcessingResponse, "request_body")
_RESPONSE_BODY = _number(ep.ProcessingResponse, "response_body")
_COMMON = _number(ep.BodyResponse, "response")
_BODY_MUTATION = _number(ep.CommonResponse, "body_mutation")
_WHOLE_BODY = _number(ep.BodyMutation, "body")
_STREAMED = _number(ep.BodyMutation, "streamed_response")
_CHUNK = _number(ep.StreamedBodyResponse, "body")
_END = _number(ep.StreamedBodyResponse, "end_of_stream")


_REQUEST_BODY_IN = _number(ep.ProcessingRequest, "request_body")
_RESPONSE_BODY_IN = _number(ep.ProcessingRequest, "response_body")
_IN_BODY = _number(ep.HttpBody, "body")
_IN_END = _number(ep.HttpBody, "end_of_stream")
REQUEST_CHUNK, RESPONSE_CHUNK = _REQUEST_BODY_IN, _RESPONSE_BODY_IN


_TOP_REQUESTS = frozenset(range(2, 8))  # the ``request`` oneof of ProcessingRequest: 2..7
_TAIL_LIMIT = 64 * 1024  # fields after a body chunk read by hand; more goes to the runtime


def body_chunk(raw: Buffer | Sequence[Buffer]) -> tuple[int, list[memoryview], bool] | None:
    """A ``ProcessingRequest`` that is a body chunk, read without the protobuf runtime:
    (:data:`REQUEST_CHUNK` or :data:`RESPONSE_CHUNK`, the chunk as views of ``raw``,
    ``end_of_stream``). ``raw`` is the message's bytes, or their consecutive parts (a message
    received over several frames: Envoy sends a megabyte body message in 16 KiB frames), never
    joined. Fields beside the body (``metadata_context``, which Envoy sends with every message,
    and ``attributes``) are skipped: the picker reads them on the headers messages only. ``None``
    for anything else (another kind, a field of ``HttpBody`` other than the body and its end,
    a malformed message), which the caller parses whole. Parsing each chunk with the runtime
    copied its megabyte twice."""
    parts = [memoryview(raw)] if isinstance(raw, (bytes, memoryview)) else [memoryview(p) for p in raw]
    size = 0
    for part in parts:
        size += len(part)
    head = _span(parts, 0, min(size, 24))
    if len(head) < 2 or head[0] not in (_REQUEST_BODY_IN << 3 | 2, _RESPONSE_BODY_IN << 3 | 2):
        return None
    kind = head[0] >> 3
    inner, pos = _read_varint(head, 1)
    inner_end = pos + inner
    if inner < 0 or inner_end > size:
        return None
    chunk: list[memoryview] = []
    after = pos
    if pos < inner_end and head[pos] == _IN_BODY << 3 | 2:
        length, after = _read_varint(head, pos + 1)
        if length < 0 or after + length > inner_end:
            return None
        chunk = _slice(parts, after, after + length)
        after += length
    if size - after > _TAIL_LIMIT:
        return None
    tail = _span(parts, after, size)
    end = False
    pos = 0
    inner_end -= after
    while pos < inner_end:  # the rest of HttpBody: only end_of_stream is expected
        if tail[pos] != _IN_END << 3:
            return None
        value, pos = _read_varint(tail, pos + 1)
        end = bool(value)
    if pos != inner_end:
        return None
    while pos < len(tail):  # the message's other fields: skipped (never another request kind)
        key, pos = _read_varint(tail, pos)
        if key < 0 or key >> 3 in _TOP_REQUESTS:
            return None
        wire = key & 7
        if wire == 0:
            _, pos = _read_varint(tail, pos)
        elif wire == 2:
            length, pos = _read_varint(tail, pos)
            pos = pos + length if length >= 0 else len(tail) + 1
        elif wire == 1 or wire == 5:
            pos += 8 if wire == 1 else 4
        else:
            return None
    if pos != len(tail):
        return None
    return kind, chunk, end


def _slice(parts: Sequence[memoryview], start: int, stop: int) -> list[memoryview]:
    """Bytes ``start:stop`` of the consecutive ``parts``, as views (no copy)."""
    out = []
    offset = 0
    for part in parts:
        size = len(part)
        if offset + size > start and offset < stop:
            out.append(part[max(start - offset, 0) : min(stop - offset, size)])
        offset += size
        if offset >= stop:
            break
    return out


def _span(parts: Sequence[memoryview], start: int, stop: int) -> memoryview:
    """Bytes ``start:stop`` of the consecutive ``parts`` as one view (copied only when they
    straddle parts: callers ask for a few bytes)."""
    pieces = _slice(parts, start, stop)
    if len(pieces) == 1:
        return pieces[0]
    return memoryview(b"".join(pieces))


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(view):
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return -1, len(view) + 1  # truncated: no caller's bounds check passes


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(number: int, size: int) -> bytes:
    """The key and length of a length-delimited field (wire type 2) of ``size`` bytes."""
    return _varint(number << 3 | 2) + _varint(size)


def _nested(path: Sequence[int], leaf: Sequence[Buffer], before: bytes = b"") -> Wire:
    """``leaf`` (the innermost message's serialized fields) inside the embedded fields ``path``
    (outermost first): the keys and lengths of every level (after ``before``, other fields of
    the outermost message) as one small ``bytes``, then the leaf's parts as they are."""
    size = 0
    for piece in leaf:
        size += len(piece)
    heads: list[bytes] = []
    for number in reversed(path):
        head = _delimited(number, size)
        heads.append(head)
        size += len(head)
    heads.append(before)
    heads.reverse()
    return [b"".join(heads), *leaf]


_END_TRUE = _varint(_END << 3) + b"\x01"


def _streamed_body(answer: int, pieces: Sequence[Buffer], size: int, end: bool) -> Wire:
    leaf: list[Buffer] = [_delimited(_CHUNK, size), *pieces] if size else []
    if end:
        leaf.append(_END_TRUE)
    return _nested((answer, _COMMON, _BODY_MUTATION, _STREAMED), leaf)


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
    if value is not None and value.string_value.strip():
        return str(value.string_value).strip()
    attributes = message.attributes.get(FILTER_NAME)
    if attributes is not None and UPSTREAM_ADDRESS in attributes.fields:
        text = str(attributes.fields[UPSTREAM_ADDRESS].string_value).strip()
        return text or None
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


def _routing(
    destination: str, set_headers: Sequence[tuple[str, str]], remove: Sequence[str]
) -> tuple[ep.CommonResponse, struct_pb2.Struct]:
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION: destination}})
    common = ep.CommonResponse(
        header_mutation=_mutation([(DESTINATION, destination), *set_headers], remove),
        clear_route_cache=True,
    )
    return common, metadata


def route_headers(
    destination: str, set_headers: Sequence[tuple[str, str]], remove: Sequence[str]
) -> ep.ProcessingResponse:
    """The request-headers answer that routes: the destination header (and the same value in
    dynamic metadata ``envoy.lb``, where GIE's protocol also puts it), the extra routing headers,
    the client's routing headers removed, and the route cache cleared so Envoy picks the cluster
    again with the new headers."""
    common, metadata = _routing(destination, set_headers, remove)
    return ep.ProcessingResponse(
        request_headers=ep.HeadersResponse(response=common), dynamic_metadata=metadata
    )


def route_body(
    destination: str, set_headers: Sequence[tuple[str, str]], remove: Sequence[str], body: Body | None
) -> Answer:
    """The same routing as :func:`route_headers`, as the answer to a ``BUFFERED`` request body
    (Envoy still holds the headers, so their mutations apply): ``body`` replaces the client's
    when given (one protobuf field: the pieces joined once), else the client's body goes as it
    came, without crossing the picker again."""
    common, metadata = _routing(destination, set_headers, remove)
    routing = ep.ProcessingResponse(request_body=ep.BodyResponse(response=common), dynamic_metadata=metadata)
    if body is None:
        return routing
    pieces = [body] if isinstance(body, bytes) else list(body)
    leaf = [_delimited(_WHOLE_BODY, len(body)), *pieces]
    return _nested((_REQUEST_BODY, _COMMON, _BODY_MUTATION), leaf, before=routing.SerializeToString())


def continue_request_headers() -> ep.ProcessingResponse:
    return ep.ProcessingResponse(request_headers=ep.HeadersResponse(response=ep.CommonResponse()))


def response_headers(set_headers: Sequence[tuple[str, str]]) -> ep.ProcessingResponse:
    """The response-headers answer: the upstream's headers plus mmgate's own (which endpoint
    served, the tokens priced), as the HTTP gateway adds them."""
    common = ep.CommonResponse(header_mutation=_mutation(set_headers))
    return ep.ProcessingResponse(response_headers=ep.HeadersResponse(response=common))


def _slices(body: Body | Sequence[Buffer], size: int) -> Iterator[tuple[list[Buffer], int]]:
    """``body`` in consecutive slices of at most ``size`` bytes, each as views of the body's own
    bytes (never copied: the socket writes them as they are) and its length."""
    pieces: Iterable[Buffer] = [body] if isinstance(body, bytes) else body
    held: list[Buffer] = []
    room = size
    for piece in pieces:
        view = memoryview(piece)
        length = len(view)
        start = 0
        while start < length:
            take = min(room, length - start)
            held.append(view if take == length else view[start : start + take])
            start += take
            room -= take
            if not room:
                yield held, size
                held = []
                room = size
    if held:
        yield held, size - room


def request_body(body: Body, *, end: bool) -> list[Answer]:
    """``body`` streamed back to Envoy for the upstream, in chunks of at most :data:`MAX_CHUNK`
    (``FULL_DUPLEX_STREAMED``: what is not sent back, the upstream never gets)."""
    return _streamed(_REQUEST_BODY, body, len(body), end)


def response_body(body: Sequence[Buffer], *, end: bool) -> list[Answer]:
    """An upstream body chunk (its parts) passed through to the client unchanged."""
    size = 0
    for piece in body:
        size += len(piece)
    if size <= MAX_CHUNK:  # the usual case: one answer around the chunk as it came
        return [_streamed_body(_RESPONSE_BODY, body, size, end)]
    return _streamed(_RESPONSE_BODY, body, size, end)


def _streamed(answer: int, body: Body | Sequence[Buffer], size: int, end: bool) -> list[Answer]:
    if not size:
        return [_streamed_body(answer, (), 0, end)]
    last = (size - 1) // MAX_CHUNK
    return [
        _streamed_body(answer, pieces, length, end and n == last)
        for n, (pieces, length) in enumerate(_slices(body, MAX_CHUNK))
    ]


def continue_response_body() -> ep.ProcessingResponse:
    """The answer to a ``STREAMED`` (or ``BUFFERED``) response body chunk: pass it on as it is."""
    return ep.ProcessingResponse(response_body=ep.BodyResponse(response=ep.CommonResponse()))


def request_trailers() -> ep.ProcessingResponse:
    return ep.ProcessingResponse(request_trailers=ep.TrailersResponse())


def response_trailers() -> ep.ProcessingResponse:
    return ep.ProcessingResponse(response_trailers=ep.TrailersResponse())


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
