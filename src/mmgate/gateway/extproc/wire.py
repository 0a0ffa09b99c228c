"""The protobuf messages the picker reads and writes by hand: ext_proc's body-carrying ones
(both ways), the routing and response-headers answers, and gRPC health's two.

A body crosses the picker twice in ``FULL_DUPLEX_STREAMED`` (Envoy sends it, the picker sends
it back for the upstream), as megabytes for a request with inline images. The protobuf runtime
copies a bytes field on every parse and at every nesting level it serializes (about a
millisecond per copy of a megabyte): ten milliseconds for one three-image body, more than all
else the picker does. Here a body chunk is read as views of the frames it arrived in, and an
answer is written as a few bytes of keys and lengths followed by views of the body, so the
body's bytes are not copied between the socket read and the socket write (protobuf encoding,
https://protobuf.dev/programming-guides/encoding/: a length-delimited field is its key, its
length as a varint, its bytes; an embedded message is such a field).

Free of the protobuf runtime and Envoy's generated modules on purpose: this module is compiled
with mypyc (:mod:`mmgate.compiled`), and pip's isolated build has neither. The field numbers
below are ``envoy.service.ext_proc.v3``'s and ``grpc.health.v1``'s; a test checks them
against the generated descriptors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final, TypeAlias

from mmgate.request.pieces import Body

MAX_CHUNK: Final = 62_000  # body chunks sent back to Envoy stay under this (llm-d's EPP does the same)

Buffer: TypeAlias = "bytes | memoryview"
Wire: TypeAlias = "list[bytes | memoryview]"
"""A serialized message as consecutive parts (a body-carrying answer: its few bytes of keys and
lengths, then views of the body)."""

# ProcessingResponse.request_body / .response_body -> BodyResponse.response -> CommonResponse
# .body_mutation -> BodyMutation.body (BUFFERED) or .streamed_response -> StreamedBodyResponse
REQUEST_BODY_OUT: Final = 3
RESPONSE_BODY_OUT: Final = 4
COMMON: Final = 1
BODY_MUTATION: Final = 3
WHOLE_BODY: Final = 1
STREAMED: Final = 3
CHUNK: Final = 1
CHUNK_END: Final = 2
# ProcessingRequest.request_body / .response_body (an HttpBody: body, end_of_stream)
REQUEST_CHUNK: Final = 4
RESPONSE_CHUNK: Final = 5
IN_BODY: Final = 1
IN_END: Final = 2
REQUEST_KINDS: Final = frozenset(range(2, 8))  # ProcessingRequest's ``request`` oneof: 2..7
# ProcessingResponse.request_headers / .response_headers / .dynamic_metadata; HeadersResponse and
# BodyResponse carry a CommonResponse in field 1 (COMMON)
REQUEST_HEADERS_OUT: Final = 1
RESPONSE_HEADERS_OUT: Final = 2
DYNAMIC_METADATA: Final = 8
HEADER_MUTATION: Final = 2  # CommonResponse.header_mutation
CLEAR_ROUTE_CACHE: Final = 5  # CommonResponse.clear_route_cache
SET_HEADERS: Final = 1  # HeaderMutation.set_headers (HeaderValueOption)
REMOVE_HEADERS: Final = 2  # HeaderMutation.remove_headers
OPTION_HEADER: Final = 1  # HeaderValueOption.header (HeaderValue)
OPTION_APPEND_ACTION: Final = 3  # HeaderValueOption.append_action
OVERWRITE_IF_EXISTS_OR_ADD: Final = 2
HEADER_KEY: Final = 1  # HeaderValue.key
HEADER_RAW_VALUE: Final = 3  # HeaderValue.raw_value
STRUCT_FIELDS: Final = 1  # google.protobuf.Struct.fields: map entries of key (1) and value (2)
ENTRY_KEY: Final = 1
ENTRY_VALUE: Final = 2
VALUE_STRING: Final = 3  # google.protobuf.Value.string_value
VALUE_STRUCT: Final = 5  # google.protobuf.Value.struct_value
DESTINATION: Final = "x-gateway-destination-endpoint"  # the endpoint-picker protocol's header
LB_NAMESPACE: Final = "envoy.lb"  # ... and the dynamic metadata namespace holding it too
HEALTH_SERVICE: Final = 1  # HealthCheckRequest.service, HealthCheckResponse.status
HEALTH_STATUS: Final = 1

_TAIL_LIMIT: Final = 64 * 1024  # fields after a body chunk read by hand; more goes to the runtime
_SMALL: Final = 4096  # a one-part message up to this size is copied once and read as bytes
_REQUEST_CHUNK_KEY: Final = REQUEST_CHUNK << 3 | 2
_RESPONSE_CHUNK_KEY: Final = RESPONSE_CHUNK << 3 | 2


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
    one: Buffer | None = None
    if isinstance(raw, list):  # the transport's messages: a list of views
        if len(raw) == 1:
            one = raw[0]
    elif isinstance(raw, (bytes, memoryview)):
        one = raw
    if one is not None and len(one) <= _SMALL:  # a text body: read from one small copy
        data = one if isinstance(one, bytes) else bytes(one)
        if not data or (data[0] != _REQUEST_CHUNK_KEY and data[0] != _RESPONSE_CHUNK_KEY):
            return None
        inner, pos = _read_varint(data, 1)
        inner_end = pos + inner
        if inner < 0 or inner_end > len(data):
            return None
        chunk: list[memoryview] = []
        if pos < inner_end and data[pos] == IN_BODY << 3 | 2:
            length, after = _read_varint(data, pos + 1)
            if length < 0 or after + length > inner_end:
                return None
            chunk = [memoryview(one)[after : after + length]]
            pos = after + length
        end = _chunk_rest(data, pos, inner_end)
        return None if end is None else (data[0] >> 3, chunk, end)
    parts = [memoryview(raw)] if isinstance(raw, (bytes, memoryview)) else [memoryview(p) for p in raw]
    size = 0
    for part in parts:
        size += len(part)
    head = _span(parts, 0, min(size, 24))
    if len(head) < 2 or head[0] not in (_REQUEST_CHUNK_KEY, _RESPONSE_CHUNK_KEY):
        return None
    kind = head[0] >> 3
    inner, pos = _read_varint(head, 1)
    inner_end = pos + inner
    if inner < 0 or inner_end > size:
        return None
    chunk = []
    after = pos
    if pos < inner_end and head[pos] == IN_BODY << 3 | 2:
        length, after = _read_varint(head, pos + 1)
        if length < 0 or after + length > inner_end:
            return None
        chunk = _slice(parts, after, after + length)
        after += length
    if size - after > _TAIL_LIMIT:
        return None
    end = _chunk_rest(_span(parts, after, size), 0, inner_end - after)
    return None if end is None else (kind, chunk, end)


def _chunk_rest(data: bytes, pos: int, inner_end: int) -> bool | None:
    """What follows a body chunk's bytes, from ``pos`` in ``data`` (which ends with the message):
    the rest of its ``HttpBody`` up to ``inner_end`` (only ``end_of_stream`` expected), then the
    message's other fields, skipped. ``end_of_stream``, or ``None`` when the message is not a
    plain body chunk."""
    end = False
    while pos < inner_end:  # the rest of HttpBody: only end_of_stream is expected
        if data[pos] != IN_END << 3:
            return None
        value, pos = _read_varint(data, pos + 1)
        end = value != 0
    if pos != inner_end:
        return None
    size = len(data)
    while pos < size:  # the message's other fields: skipped (never another request kind)
        key, pos = _read_varint(data, pos)
        if key < 0 or 2 <= key >> 3 <= 7:  # REQUEST_KINDS: never a second request kind
            return None
        pos = _skip(data, pos, key & 7)
    if pos != size:
        return None
    return end


# ProcessingRequest.request_headers / .response_headers (an HttpHeaders: headers, a HeaderMap of
# HeaderValue; end_of_stream)
REQUEST_HEADERS_IN: Final = 2
RESPONSE_HEADERS_IN: Final = 3
HEADER_MAP: Final = 1
HEADERS_END: Final = 3
MAP_HEADERS: Final = 1
HEADER_VALUE: Final = 2  # HeaderValue.value (HEADER_KEY and HEADER_RAW_VALUE below)


# ProcessingRequest's fields beside the ``request`` oneof, and what the picker reads of them
METADATA_CONTEXT: Final = 8  # envoy.config.core.v3.Metadata
ATTRIBUTES: Final = 9  # map<string, google.protobuf.Struct>
PROTOCOL_CONFIG: Final = 11  # ProtocolConfiguration: request_body_mode 1, response_body_mode 2
ATTRIBUTES_FILTER: Final = "envoy.filters.http.ext_proc"  # the attributes' key of this filter
UPSTREAM_ADDRESS: Final = "upstream.address"  # the attribute naming the pod that served
_INT32_MAX: Final = (1 << 31) - 1


class HeadersRead:
    """What the picker reads of a headers ``ProcessingRequest`` (:func:`headers_message`)."""

    def __init__(
        self,
        request: bool,
        pairs: list[tuple[str, str]],
        end: bool,
        modes: tuple[int, int] | None,
        upstream: str | None,
    ) -> None:
        self.request = request  # request headers (else the response's)
        self.pairs = pairs  # the header list, pseudo-headers included
        self.end = end  # end_of_stream
        self.modes = modes  # protocol_config's request and response body modes, when sent
        self.upstream = upstream  # the ``upstream.address`` attribute, when sent


def headers_message(raw: Buffer) -> HeadersRead | None:
    """A ``ProcessingRequest`` that is a headers message, read without the protobuf runtime:
    the header list (each value its ``raw_value`` read as Latin-1, else its ``value``),
    ``end_of_stream``, ``protocol_config``'s body modes and the ``upstream.address`` attribute
    of this filter. ``None`` for anything the runtime would read differently or refuse (another
    kind, a field repeated that the runtime merges, a key that is not UTF-8, a malformed
    message) and for a message whose ``metadata_context`` is not empty (Envoy sends it empty
    unless told to forward metadata; the subset hint and the served endpoint live there): the
    caller reads those through the runtime. The runtime's parse, and its objects read back
    attribute by attribute, were about a fifth of the picker's instructions on a text request.
    (A headers message is a few hundred bytes: it is read as ``bytes``, whose indexing compiles
    to a load, where a view's does not.)"""
    data = bytes(raw)
    size = len(data)
    pairs: list[tuple[str, str]] = []
    kind = 0
    end = False
    modes: tuple[int, int] | None = None
    upstream: str | None = None
    pos = 0
    while pos < size:
        key, pos = _read_varint(data, pos)
        if key < 0:
            return None
        number = key >> 3
        wire_type = key & 7
        if wire_type != 2:
            pos = _skip(data, pos, wire_type)
            continue
        length, pos = _read_varint(data, pos)
        stop = pos + length
        if length < 0 or stop > size:
            return None
        if 2 <= number <= 7:  # the ``request`` oneof
            if kind or (number != REQUEST_HEADERS_IN and number != RESPONSE_HEADERS_IN):
                return None
            kind = number
            read = _http_headers(data, pos, stop, pairs)
            if read < 0:
                return None
            end = read == 1
        elif number == METADATA_CONTEXT:
            if length:
                return None
        elif number == ATTRIBUTES:
            found = _attribute(data, pos, stop)
            if found is None:
                return None
            if found[0]:  # this filter's entry: a later one replaces it, as in a map
                upstream = found[1]
        elif number == PROTOCOL_CONFIG:
            modes = _protocol_config(data, pos, stop, modes or (0, 0))
            if modes is None:
                return None
        pos = stop
    if pos != size or not kind:
        return None
    return HeadersRead(kind == REQUEST_HEADERS_IN, pairs, end, modes, upstream)


def _http_headers(data: bytes, pos: int, stop: int, pairs: list[tuple[str, str]]) -> int:
    """An ``HttpHeaders``' header list appended to ``pairs``: 1 if it ends the stream, 0 if
    not, -1 when the runtime would read it otherwise (two maps, which it merges) or refuse it."""
    end = 0
    have_map = False
    while pos < stop:
        key, pos = _read_varint(data, pos)
        if key < 0:
            return -1
        number = key >> 3
        wire_type = key & 7
        if number == HEADER_MAP and wire_type == 2:
            length, pos = _read_varint(data, pos)
            if have_map or length < 0 or pos + length > stop:
                return -1
            have_map = True
            if not _header_values(data, pos, pos + length, pairs):
                return -1
            pos += length
        elif number == HEADERS_END and wire_type == 0:
            value, pos = _read_varint(data, pos)
            end = 1 if value != 0 else 0
        else:
            pos = _skip(data, pos, wire_type)
    return end if pos == stop else -1


def _attribute(data: bytes, pos: int, stop: int) -> tuple[bool, str | None] | None:
    """One entry of ``attributes``: whether it is this filter's and, if so, its
    ``upstream.address`` (``None`` when absent; another kind of value reads as ``""``, as the
    runtime's ``string_value`` does). ``None`` when malformed or given in a way the runtime
    merges (a field of the entry twice)."""
    entry = _map_entry(data, pos, stop)
    if entry is None:
        return None
    name, start, end = entry
    if name != ATTRIBUTES_FILTER:
        return False, None
    if start < 0:
        return True, None
    return _struct_string(data, start, end, UPSTREAM_ADDRESS)


def _map_entry(data: bytes, pos: int, stop: int) -> tuple[str, int, int] | None:
    """A map entry with a string key: the key (``""`` when absent) and where its value lies
    (-1, -1 when absent); ``None`` when malformed, a field comes twice (the runtime would merge
    the values) or the key is not UTF-8."""
    name: str | None = None
    start = end = -1
    while pos < stop:
        key, pos = _read_varint(data, pos)
        if key == ENTRY_KEY << 3 | 2 or key == ENTRY_VALUE << 3 | 2:
            length, pos = _read_varint(data, pos)
            if length < 0 or pos + length > stop:
                return None
            if key == ENTRY_KEY << 3 | 2:
                if name is not None:
                    return None
                try:
                    name = data[pos : pos + length].decode()
                except UnicodeDecodeError:
                    return None
            else:
                if start >= 0:
                    return None
                start, end = pos, pos + length
            pos += length
        elif key < 0:
            return None
        else:
            pos = _skip(data, pos, key & 7)
    if pos != stop:
        return None
    return name or "", start, end


def _struct_string(data: bytes, pos: int, stop: int, wanted: str) -> tuple[bool, str | None] | None:
    """The ``string_value`` of the field ``wanted`` of a ``google.protobuf.Struct`` (``None``
    when absent; a later entry of the same name replaces an earlier one, as in a map; another
    kind of value reads as ``""``)."""
    found: str | None = None
    while pos < stop:
        key, pos = _read_varint(data, pos)
        if key == STRUCT_FIELDS << 3 | 2:
            length, pos = _read_varint(data, pos)
            if length < 0 or pos + length > stop:
                return None
            entry = _map_entry(data, pos, pos + length)
            if entry is None:
                return None
            name, start, end = entry
            if name == wanted:
                found = "" if start < 0 else _value_string(data, start, end)
                if found is None:
                    return None
            pos += length
        elif key < 0:
            return None
        else:
            pos = _skip(data, pos, key & 7)
    return (True, found) if pos == stop else None


def _value_string(data: bytes, pos: int, stop: int) -> str | None:
    """A ``google.protobuf.Value``'s ``string_value`` (``""`` when another member of its oneof
    is set; the last member given counts); ``None`` when malformed or a member comes twice."""
    text = ""
    members = 0
    while pos < stop:
        key, pos = _read_varint(data, pos)
        if key < 0:
            return None
        members += 1
        if key == VALUE_STRING << 3 | 2:
            length, pos = _read_varint(data, pos)
            if length < 0 or pos + length > stop:
                return None
            try:
                text = data[pos : pos + length].decode()
            except UnicodeDecodeError:
                return None
            pos += length
        else:
            text = ""
            pos = _skip(data, pos, key & 7)
    if pos != stop or members > 1:
        return None
    return text


def _protocol_config(data: bytes, pos: int, stop: int, modes: tuple[int, int]) -> tuple[int, int] | None:
    """``modes`` updated from a ``ProtocolConfiguration`` (a second one merges into the first,
    as in the runtime); ``None`` when malformed or a mode is beyond an enum's range."""
    request, response = modes
    while pos < stop:
        key, pos = _read_varint(data, pos)
        if key == 1 << 3 or key == 2 << 3:
            value, pos = _read_varint(data, pos)
            if value < 0 or value > _INT32_MAX:
                return None
            if key == 1 << 3:
                request = value
            else:
                response = value
        elif key < 0:
            return None
        else:
            pos = _skip(data, pos, key & 7)
    return (request, response) if pos == stop else None


def _header_values(data: bytes, pos: int, stop: int, pairs: list[tuple[str, str]]) -> bool:
    """A ``HeaderMap``'s ``HeaderValue`` entries appended to ``pairs``; ``False`` if malformed."""
    while pos < stop:
        key, pos = _read_varint(data, pos)
        if key == MAP_HEADERS << 3 | 2:
            length, pos = _read_varint(data, pos)
            if length < 0 or pos + length > stop:
                return False
            pair = _header_value(data, pos, pos + length)
            if pair is None:
                return False
            pairs.append(pair)
            pos += length
        elif key < 0:
            return False
        else:
            pos = _skip(data, pos, key & 7)
    return pos == stop


def _header_value(data: bytes, pos: int, stop: int) -> tuple[str, str] | None:
    """One ``HeaderValue`` (a scalar field given twice: the last one counts, as in the runtime)."""
    name = ""
    text = ""
    raw_value = b""
    try:
        while pos < stop:
            key, pos = _read_varint(data, pos)
            number = key >> 3
            if key & 7 == 2 and HEADER_KEY <= number <= HEADER_RAW_VALUE:
                length, pos = _read_varint(data, pos)
                if length < 0 or pos + length > stop:
                    return None
                if number == HEADER_KEY:
                    name = data[pos : pos + length].decode()
                elif number == HEADER_VALUE:
                    text = data[pos : pos + length].decode()
                else:
                    raw_value = data[pos : pos + length]
                pos += length
            elif key < 0:
                return None
            else:
                pos = _skip(data, pos, key & 7)
    except UnicodeDecodeError:
        return None
    if pos != stop:
        return None
    return name, raw_value.decode("latin-1") if raw_value else text


def _skip(data: bytes, pos: int, wire_type: int) -> int:
    """The position after a field's value of ``wire_type`` (past the end when it cannot be
    skipped, so the caller's final position check fails)."""
    if wire_type == 0:
        return _read_varint(data, pos)[1]
    if wire_type == 2:
        length, pos = _read_varint(data, pos)
        return pos + length if length >= 0 else len(data) + 1
    if wire_type == 1:
        return pos + 8
    if wire_type == 5:
        return pos + 4
    return len(data) + 1


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


def _span(parts: Sequence[memoryview], start: int, stop: int) -> bytes:
    """Bytes ``start:stop`` of the consecutive ``parts``, copied (callers ask for the few bytes
    around a body, whose indexing compiles to a load where a view's does not)."""
    pieces = _slice(parts, start, stop)
    if len(pieces) == 1:
        return bytes(pieces[0])
    return b"".join(pieces)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    size = len(data)
    while pos < size:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, size + 1  # truncated: no caller's bounds check passes


_ONE_BYTE: Final = [bytes((n,)) for n in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    out: list[int] = []
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def delimited(number: int, size: int) -> bytes:
    """The key and length of a length-delimited field (wire type 2) of ``size`` bytes."""
    return _varint(number << 3 | 2) + _varint(size)


def nested(path: Sequence[int], leaf: Sequence[Buffer], before: bytes = b"") -> Wire:
    """``leaf`` (the innermost message's serialized fields) inside the embedded fields ``path``
    (outermost first): the keys and lengths of every level (after ``before``, other fields of
    the outermost message) as one small ``bytes``, then the leaf's parts as they are."""
    size = 0
    for piece in leaf:
        size += len(piece)
    return [before + _heads(path, size), *leaf]


def _heads(path: Sequence[int], size: int) -> bytes:
    """The keys and lengths of the embedded fields ``path`` (outermost first) around ``size``
    bytes of the innermost message."""
    heads: list[bytes] = []
    for number in reversed(path):
        head = delimited(number, size)
        heads.append(head)
        size += len(head)
    heads.reverse()
    return b"".join(heads)


_END_TRUE: Final = _varint(CHUNK_END << 3) + b"\x01"


_HEADS: Final[dict[int, bytes]] = {}  # streamed_body's keys and lengths, by answer, size and end
_HEADS_KEPT: Final = 4096


def streamed_body(answer: int, pieces: Sequence[Buffer], size: int, end: bool) -> Wire:
    """A ``StreamedBodyResponse`` of ``size`` bytes (``pieces``) in the ``answer`` field: the
    bytes in front of the body depend on these three only, so they are built once (a body goes
    back in equal chunks; responses repeat their sizes)."""
    key = size << 4 | answer << 1 | end
    head = _HEADS.get(key)
    if head is None:
        chunk = delimited(CHUNK, size) if size else b""
        tail = _END_TRUE if end else b""
        head = _heads((answer, COMMON, BODY_MUTATION, STREAMED), len(chunk) + size + len(tail)) + chunk
        if len(_HEADS) >= _HEADS_KEPT:
            _HEADS.clear()
        _HEADS[key] = head
    out: list[Buffer] = [head, *pieces]
    if end:
        out.append(_END_TRUE)
    return out


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


def request_body(body: Body, *, end: bool) -> list[Wire]:
    """``body`` streamed back to Envoy for the upstream, in chunks of at most :data:`MAX_CHUNK`
    (``FULL_DUPLEX_STREAMED``: what is not sent back, the upstream never gets)."""
    return _streamed(REQUEST_BODY_OUT, body, len(body), end)


def response_body(body: Sequence[Buffer], *, end: bool) -> list[Wire]:
    """An upstream body chunk (its parts) passed through to the client unchanged."""
    return echoed(RESPONSE_BODY_OUT, body, end=end)


def echoed(answer: int, chunk: Sequence[Buffer], *, end: bool) -> list[Wire]:
    """A body chunk as received (its parts) sent back unchanged in the ``answer`` field
    (:data:`REQUEST_BODY_OUT` or :data:`RESPONSE_BODY_OUT`), in answers of at most
    :data:`MAX_CHUNK` bytes."""
    size = 0
    for piece in chunk:
        size += len(piece)
    if size <= MAX_CHUNK:  # the usual case: one answer around the chunk as it came
        return [streamed_body(answer, chunk, size, end)]
    return _streamed(answer, chunk, size, end)


def _streamed(answer: int, body: Body | Sequence[Buffer], size: int, end: bool) -> list[Wire]:
    if not size:
        return [streamed_body(answer, (), 0, end)]
    last = (size - 1) // MAX_CHUNK
    return [
        streamed_body(answer, pieces, length, end and n == last)
        for n, (pieces, length) in enumerate(_slices(body, MAX_CHUNK))
    ]


def health_service(raw: Buffer) -> str | None:
    """The ``service`` of a ``grpc.health.v1.HealthCheckRequest`` (its only field; ``""`` when
    absent), ``None`` when ``raw`` is not one. Unknown fields are skipped as the runtime does."""
    data = bytes(raw)
    service = ""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        if key < 0:
            return None
        wire_type = key & 7
        if wire_type == 2:
            length, pos = _read_varint(data, pos)
            if length < 0 or pos + length > len(data):
                return None
            if key >> 3 == HEALTH_SERVICE:
                try:
                    service = data[pos : pos + length].decode()
                except UnicodeDecodeError:
                    return None
            pos += length
        else:
            pos = _skip(data, pos, wire_type)
    return service if pos == len(data) else None


def health_answer(status: int) -> bytes:
    """A ``grpc.health.v1.HealthCheckResponse`` with ``status`` (proto3 leaves 0 out)."""
    return _varint(HEALTH_STATUS << 3) + _varint(status) if status else b""


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field: a string, bytes, or an embedded message's serialized form."""
    return delimited(number, len(data)) + data


_OVERWRITE: Final = _varint(OPTION_APPEND_ACTION << 3) + _varint(OVERWRITE_IF_EXISTS_OR_ADD)
_CLEAR_ROUTE_CACHE: Final = _varint(CLEAR_ROUTE_CACHE << 3) + b"\x01"


def header_mutation(set_headers: Iterable[tuple[str, str]], remove: Iterable[str] = ()) -> bytes:
    """A ``HeaderMutation``: each header set (``raw_value``, overwriting a header of the same
    name or adding it), then the names to remove. Values are Latin-1 (header bytes as the HTTP
    layer keeps them), as Envoy reads ``raw_value`` first."""
    parts: list[bytes] = []
    for name, value in set_headers:
        parts.append(_set_header(name, value))
    for name in remove:
        parts.append(_field(REMOVE_HEADERS, name.encode()))
    return b"".join(parts)


_KEYS: Final[dict[str, bytes]] = {}  # a header name's HeaderValue.key field, by name
_ROUTES: Final[dict[str, tuple[bytes, bytes]]] = {}  # by destination: its header, its metadata
_KEPT: Final = 1024  # names and destinations remembered (a gateway's are few; more: start again)


def _set_header(name: str, value: str) -> bytes:
    """One ``set_headers`` entry of a ``HeaderMutation`` (a ``HeaderValueOption``)."""
    key = _KEYS.get(name)
    if key is None:
        key = _field(HEADER_KEY, name.encode()) if name else b""
        if len(_KEYS) >= _KEPT:
            _KEYS.clear()
        _KEYS[name] = key
    header = key + _field(HEADER_RAW_VALUE, value.encode("latin-1")) if value else key
    return _field(SET_HEADERS, _field(OPTION_HEADER, header) + _OVERWRITE)


def _route_parts(destination: str) -> tuple[bytes, bytes]:
    """The destination's ``set_headers`` entry and the ``envoy.lb`` dynamic metadata naming it:
    built once per destination (a gateway routes to the same few pods again and again)."""
    parts = _ROUTES.get(destination)
    if parts is None:
        value = _field(VALUE_STRING, destination.encode())  # a oneof member: written even when empty
        inner = _field(STRUCT_FIELDS, _field(ENTRY_KEY, DESTINATION.encode()) + _field(ENTRY_VALUE, value))
        lb = _field(VALUE_STRUCT, inner)
        metadata = _field(STRUCT_FIELDS, _field(ENTRY_KEY, LB_NAMESPACE.encode()) + _field(ENTRY_VALUE, lb))
        parts = (_set_header(DESTINATION, destination), _field(DYNAMIC_METADATA, metadata))
        if len(_ROUTES) >= _KEPT:
            _ROUTES.clear()
        _ROUTES[destination] = parts
    return parts


def routing(
    answer: int, destination: str, set_headers: Iterable[tuple[str, str]], remove: Iterable[str]
) -> bytes:
    """The answer (``REQUEST_HEADERS_OUT``, or ``REQUEST_BODY_OUT`` for a ``BUFFERED`` body) that
    routes: the destination in the header and in the dynamic metadata ``envoy.lb`` (the
    endpoint-picker protocol puts it in both), the extra routing headers set, the client's
    routing headers removed, and the route cache cleared so Envoy picks the cluster again."""
    header, metadata = _route_parts(destination)
    mutation = header + header_mutation(set_headers, remove)
    common = _field(HEADER_MUTATION, mutation) + _CLEAR_ROUTE_CACHE
    return _field(answer, _field(COMMON, common)) + metadata


def response_headers(set_headers: Iterable[tuple[str, str]]) -> bytes:
    """The response-headers answer that adds ``set_headers`` to the upstream's."""
    common = _field(HEADER_MUTATION, header_mutation(set_headers))
    return _field(RESPONSE_HEADERS_OUT, _field(COMMON, common))
