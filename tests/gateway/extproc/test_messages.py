"""The request body handed back to Envoy: the same chunks whether the body is held whole or as
the pieces of a media-uuid splice; the hand-written wire bytes parse as the messages they stand
for."""

from __future__ import annotations

import itertools

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from mmgate.gateway import extproc
from mmgate.gateway.extproc.lean import MessageReader
from mmgate.gateway.extproc.messages import Answer, header_pairs, route_body, served_endpoint, subset_hint
from mmgate.gateway.extproc.wire import (
    MAX_CHUNK,
    REQUEST_CHUNK,
    RESPONSE_CHUNK,
    body_chunk,
    headers_message,
    health_answer,
    health_service,
    request_body,
    response_body,
)
from mmgate.request import parse_request
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import with_media_uuids
from mmgate.request.pieces import BodyPieces, joined
from mmgate.request.view import Api
from support.bodies import photo_chat


def parsed(answers: list[Answer]) -> list[ep.ProcessingResponse]:
    out = []
    for answer in answers:
        if isinstance(answer, list):
            answer = b"".join(answer)
        out.append(ep.ProcessingResponse.FromString(answer) if isinstance(answer, bytes) else answer)
    return out


def wire(answers: list[Answer]) -> list[bytes]:
    return [b"".join(a) if isinstance(a, list) else bytes(a) for a in answers]  # type: ignore[arg-type]


@pytest.mark.parametrize("images", [0, 1, 3])
def test_a_spliced_body_streams_to_envoy_in_the_chunks_of_its_joined_bytes(images: int) -> None:
    view = parse_request(photo_chat(images), {}, api=Api.CHAT, limits=Limits(own_media_uuids=True))
    body = with_media_uuids(view)
    whole = joined(body)
    assert isinstance(body, BodyPieces) == (images > 0)
    answers = parsed(request_body(body, end=True))
    streamed = [m.request_body.response.body_mutation.streamed_response for m in answers]
    cuts = range(0, len(whole), MAX_CHUNK)
    assert [s.body for s in streamed] == [whole[i : i + MAX_CHUNK] for i in cuts]
    assert [s.end_of_stream for s in streamed] == [i + MAX_CHUNK >= len(whole) for i in cuts]
    assert wire(request_body(body, end=True)) == wire(request_body(whole, end=True))


def test_an_empty_body_is_one_empty_chunk_and_a_middle_one_never_ends_the_stream() -> None:
    (only,) = parsed(request_body(b"", end=True))
    assert only.request_body.response.body_mutation.streamed_response.end_of_stream
    pieces = BodyPieces(b"x" * MAX_CHUNK, [(MAX_CHUNK, b"y")])
    assert not any(
        m.request_body.response.body_mutation.streamed_response.end_of_stream
        for m in parsed(request_body(pieces, end=False))
    )


def test_an_echoed_response_chunk_is_the_message_the_runtime_would_build() -> None:
    streamed = ep.StreamedBodyResponse(body=b"data: {}\n\n", end_of_stream=True)
    common = ep.CommonResponse(body_mutation=ep.BodyMutation(streamed_response=streamed))
    built = ep.ProcessingResponse(response_body=ep.BodyResponse(response=common))
    assert parsed(response_body([b"data: {}\n\n"], end=True)) == [built]
    assert parsed(response_body([b"data: ", b"{}\n\n"], end=True)) == [built]


def test_a_long_response_chunk_goes_back_in_chunks_of_at_most_max_chunk() -> None:
    data = bytes(range(256)) * 1000
    answers = parsed(response_body([data[:1000], data[1000:]], end=True))
    streamed = [m.response_body.response.body_mutation.streamed_response for m in answers]
    assert b"".join(s.body for s in streamed) == data
    assert max(len(s.body) for s in streamed) == MAX_CHUNK
    assert [s.end_of_stream for s in streamed] == [False] * (len(streamed) - 1) + [True]


def test_a_changed_buffered_body_rides_on_the_routing_answer() -> None:
    body = BodyPieces(b"0123456789" * 10_000, [(5, b"<uuid>")])
    (answer,) = parsed([route_body("10.0.0.1:8000", [("x-a", "1")], ["x-b"], body)])
    common = answer.request_body.response
    assert common.body_mutation.body == joined(body) and common.clear_route_cache
    keys = [h.header.key for h in common.header_mutation.set_headers]
    assert keys == ["x-gateway-destination-endpoint", "x-a"]
    assert list(common.header_mutation.remove_headers) == ["x-b"]
    assert answer.dynamic_metadata["envoy.lb"]["x-gateway-destination-endpoint"] == "10.0.0.1:8000"
    (unchanged,) = parsed([route_body("10.0.0.1:8000", [], [], None)])
    assert not unchanged.request_body.response.HasField("body_mutation")


def _read(raw: bytes | list[bytes]) -> tuple[int, bytes, bool] | None:
    got = body_chunk(raw)
    return None if got is None else (got[0], b"".join(got[1]), got[2])


@pytest.mark.parametrize("end", [True, False])
@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 700])
def test_a_body_chunk_is_read_without_the_runtime_as_the_runtime_reads_it(data: bytes, end: bool) -> None:
    for kind, field in ((REQUEST_CHUNK, "request_body"), (RESPONSE_CHUNK, "response_body")):
        message = ep.ProcessingRequest(**{field: ep.HttpBody(body=data, end_of_stream=end)})
        message.metadata_context.filter_metadata["envoy.lb"].update({"k": "v"})  # Envoy sends it
        for raw in (ep.ProcessingRequest(**{field: ep.HttpBody(body=data, end_of_stream=end)}), message):
            serialized = raw.SerializeToString()
            assert _read(serialized) == (kind, data, end)
            # the same message received over several frames, cut anywhere (within its keys too)
            for cuts in ((1,), (3, 7), (len(serialized) // 2,), (5, len(serialized) - 3)):
                edges = sorted({0, *(c for c in cuts if 0 < c < len(serialized)), len(serialized)})
                parts = [serialized[a:b] for a, b in itertools.pairwise(edges)]
                assert _read(parts) == (kind, data, end), cuts


def test_a_message_that_is_not_only_a_body_chunk_is_left_to_the_runtime() -> None:
    headers = ep.ProcessingRequest(request_headers=ep.HttpHeaders(end_of_stream=True))
    trailers = ep.HttpBody(body=b"x").SerializeToString() + b"\x18\x01"  # HttpBody field 3
    assert body_chunk(headers.SerializeToString()) is None
    assert body_chunk(b"\x22" + bytes([len(trailers)]) + trailers) is None
    assert body_chunk(b"\x22\x05\x0a\x09abc") is None  # a body longer than the message
    twice = ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x")).SerializeToString()
    assert body_chunk(twice + twice) is None  # a repeated oneof field: merged by the runtime
    assert body_chunk(twice[:-1]) is None  # truncated


def _headers_message(field: str, end: bool, metadata: bool = False) -> ep.ProcessingRequest:
    values = [
        base_pb2.HeaderValue(key=":method", raw_value=b"POST"),
        base_pb2.HeaderValue(key=":path", value="/v1/chat/completions"),  # ``value``, not raw
        base_pb2.HeaderValue(key="x-latin", raw_value="caf\u00e9".encode("latin-1")),
        base_pb2.HeaderValue(key="x-both", value="ignored", raw_value=b"raw"),
        base_pb2.HeaderValue(key="x-empty"),
        base_pb2.HeaderValue(key="x-a", raw_value=b"1"),
        base_pb2.HeaderValue(key="x-a", raw_value=b"2"),  # repeated names stay, in order
    ]
    message = ep.ProcessingRequest(
        **{field: ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=values), end_of_stream=end)}
    )
    message.metadata_context.SetInParent()  # Envoy sends it, empty unless told to forward metadata
    if metadata:
        message.metadata_context.filter_metadata["envoy.lb"].update({"k": "v"})
    message.attributes["other.filter"].update({"upstream.address": "10.9.9.9:1"})
    message.attributes["envoy.filters.http.ext_proc"].update(
        {"upstream.address": " 10.0.0.1:8000 ", "request.path": "/x", "n": 3}
    )
    message.protocol_config.request_body_mode = 4
    return message


def _as_runtime_reads_it(message: ep.ProcessingRequest) -> tuple[object, ...]:
    field = message.WhichOneof("request")
    headers = getattr(message, field)
    config = message.protocol_config
    modes = None
    if message.HasField("protocol_config"):
        modes = (config.request_body_mode, config.response_body_mode)
    served = served_endpoint(message) if field == "response_headers" else None
    return field == "request_headers", header_pairs(headers), headers.end_of_stream, modes, served


def _as_read_by_hand(raw: bytes) -> tuple[object, ...] | None:
    read = headers_message(raw)
    if read is None:
        return None
    served = extproc.messages.served(None, read.upstream) if not read.request else None
    return read.request, read.pairs, read.end, read.modes, served


@pytest.mark.parametrize("end", [True, False])
@pytest.mark.parametrize("field", ["request_headers", "response_headers"])
def test_a_headers_message_is_read_without_the_runtime_as_the_runtime_reads_it(field: str, end: bool) -> None:
    message = _headers_message(field, end)
    got = _as_read_by_hand(message.SerializeToString())
    assert got == _as_runtime_reads_it(message)
    assert got is not None and got[1][2] == ("x-latin", "caf\u00e9")  # type: ignore[index]
    message.ClearField("protocol_config")
    message.attributes["envoy.filters.http.ext_proc"].update({"upstream.address": 7})  # not a string
    assert _as_read_by_hand(message.SerializeToString()) == _as_runtime_reads_it(message)
    del message.attributes["envoy.filters.http.ext_proc"]
    assert _as_read_by_hand(message.SerializeToString()) == _as_runtime_reads_it(message)


def test_two_protocol_configs_and_repeated_attributes_read_as_the_runtime_merges_them() -> None:
    first = _headers_message("response_headers", False)
    second = ep.ProcessingRequest()
    second.protocol_config.response_body_mode = 2
    second.attributes["envoy.filters.http.ext_proc"].update({"upstream.address": "10.0.0.2:8000"})
    raw = first.SerializeToString() + second.SerializeToString()
    merged = ep.ProcessingRequest.FromString(raw)
    assert _as_read_by_hand(raw) == _as_runtime_reads_it(merged)
    assert merged.protocol_config.request_body_mode == 4 and served_endpoint(merged) == "10.0.0.2:8000"


def test_a_headers_message_the_runtime_would_read_otherwise_is_left_to_it() -> None:
    raw = _headers_message("request_headers", True).SerializeToString()
    assert headers_message(raw + raw) is None  # the headers field twice: merged by the runtime
    assert headers_message(raw[:-1]) is None  # truncated
    body = ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x")).SerializeToString()
    assert headers_message(body) is None
    assert headers_message(raw + body) is None  # two kinds of the oneof
    bad_key = ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key="k")]))
    inner = bad_key.SerializeToString().replace(b"k", b"\xff")  # not UTF-8: the runtime refuses it
    assert headers_message(b"\x12" + bytes([len(inner)]) + inner) is None
    two_maps = ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key="a")]))
    twice = two_maps.SerializeToString() * 2
    assert headers_message(b"\x12" + bytes([len(twice)]) + twice) is None  # two maps: merged by the runtime
    assert headers_message(b"") is None
    address = _headers_message("response_headers", False).SerializeToString()
    not_utf8 = address.replace(b" 10.0.0.1:8000 ", b"\xff10.0.0.1:8000 ")  # the runtime refuses it
    assert headers_message(not_utf8) is None
    with pytest.raises(DecodeError):
        ep.ProcessingRequest.FromString(not_utf8)
    # metadata (the subset hint, the served endpoint reported by the proxy): the runtime reads it
    with_metadata = _headers_message("response_headers", False, metadata=True)
    assert headers_message(with_metadata.SerializeToString()) is None
    with_metadata.metadata_context.filter_metadata["envoy.lb"].update(
        {"x-gateway-destination-endpoint-served": "10.0.0.3:8000"}
    )
    assert served_endpoint(with_metadata) == "10.0.0.3:8000"
    hinted = _headers_message("request_headers", False, metadata=True)
    hinted.metadata_context.filter_metadata["envoy.lb.subset_hint"].update(
        {"x-gateway-destination-endpoint-subset": "10.0.0.1:8000, 10.0.0.2:8000"}
    )
    assert headers_message(hinted.SerializeToString()) is None
    assert subset_hint(hinted.metadata_context) == ["10.0.0.1:8000", "10.0.0.2:8000"]


@pytest.mark.parametrize("read", [1, 4, 5, 6, 16_384, 1 << 20])
def test_grpc_messages_come_out_whole_and_in_order_however_the_frames_cut_them(read: int) -> None:
    sent = [b"", b"a", bytes(range(256)) * 300, b"xyz" * 7]
    wire = b"".join(b"\x00" + len(m).to_bytes(4, "big") + m for m in sent)
    reader = MessageReader()
    got = []
    for i in range(0, len(wire), read):
        got.extend(b"".join(parts) for parts in reader.feed(wire[i : i + read]))
    assert got == sent


def test_the_field_numbers_written_by_hand_are_the_generated_descriptors_ones() -> None:
    wire = extproc.wire

    def number(message: type, field: str) -> int:
        return int(message.DESCRIPTOR.fields_by_name[field].number)  # type: ignore[attr-defined]

    assert (
        number(ep.ProcessingResponse, "request_body"),
        number(ep.ProcessingResponse, "response_body"),
    ) == (wire.REQUEST_BODY_OUT, wire.RESPONSE_BODY_OUT)
    assert number(ep.BodyResponse, "response") == wire.COMMON
    assert number(ep.CommonResponse, "body_mutation") == wire.BODY_MUTATION
    assert (
        number(ep.BodyMutation, "body"),
        number(ep.BodyMutation, "streamed_response"),
    ) == (wire.WHOLE_BODY, wire.STREAMED)
    assert (
        number(ep.StreamedBodyResponse, "body"),
        number(ep.StreamedBodyResponse, "end_of_stream"),
    ) == (wire.CHUNK, wire.CHUNK_END)
    assert (
        number(ep.ProcessingRequest, "request_body"),
        number(ep.ProcessingRequest, "response_body"),
    ) == (REQUEST_CHUNK, RESPONSE_CHUNK)
    assert (number(ep.HttpBody, "body"), number(ep.HttpBody, "end_of_stream")) == (wire.IN_BODY, wire.IN_END)
    oneof = ep.ProcessingRequest.DESCRIPTOR.oneofs_by_name["request"]
    assert {f.number for f in oneof.fields} == wire.REQUEST_KINDS
    assert number(health_pb2.HealthCheckRequest, "service") == wire.HEALTH_SERVICE
    assert number(health_pb2.HealthCheckResponse, "status") == wire.HEALTH_STATUS


@pytest.mark.parametrize(
    "service", ["", "liveness", "envoy.service.ext_proc.v3.ExternalProcessor", "é" * 200]
)
def test_health_messages_by_hand_are_the_runtime_s(service: str) -> None:
    assert health_service(health_pb2.HealthCheckRequest(service=service).SerializeToString()) == service
    for status in (0, 1, 2, 3):
        assert health_answer(status) == health_pb2.HealthCheckResponse(status=status).SerializeToString()
    assert health_service(b"\x0a\x05ab") is None  # truncated
    assert health_service(b"\x0a\x02\xff\xfe") is None  # not UTF-8
    assert health_service(b"\x10\x01\x0a\x01x") == "x"  # an unknown field is skipped


def _runtime_mutation(set_headers: list[tuple[str, str]], remove: list[str]) -> ep.HeaderMutation:
    option = base_pb2.HeaderValueOption
    return ep.HeaderMutation(
        set_headers=[
            option(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode("latin-1")),
                append_action=option.OVERWRITE_IF_EXISTS_OR_ADD,
            )
            for k, v in set_headers
        ],
        remove_headers=remove,
    )


ROUTES = [
    ("10.0.0.1:8000", [], []),
    (
        "10.0.0.1:8000,10.0.0.2:8000",
        [("x-mmgate-tokens", "1234"), ("x-empty", ""), ("x-latin", "café")],
        ["x-a"],
    ),
    ("", [("x-request-id", "r" * 300)], ["x-a", "x-b", ""]),
]


@pytest.mark.parametrize(("destination", "extra", "remove"), ROUTES)
def test_the_routing_answers_by_hand_are_the_runtime_s_bytes(
    destination: str, extra: list[tuple[str, str]], remove: list[str]
) -> None:
    metadata = struct_pb2.Struct()
    metadata.update({"envoy.lb": {"x-gateway-destination-endpoint": destination}})
    common = ep.CommonResponse(
        header_mutation=_runtime_mutation([("x-gateway-destination-endpoint", destination), *extra], remove),
        clear_route_cache=True,
    )
    headers = ep.ProcessingResponse(
        request_headers=ep.HeadersResponse(response=common), dynamic_metadata=metadata
    )
    body = ep.ProcessingResponse(request_body=ep.BodyResponse(response=common), dynamic_metadata=metadata)
    assert extproc.wire.routing(extproc.wire.REQUEST_HEADERS_OUT, destination, extra, remove) == (
        headers.SerializeToString()
    )
    assert route_body(destination, extra, remove, None) == body.SerializeToString()
    response = ep.ProcessingResponse(
        response_headers=ep.HeadersResponse(
            response=ep.CommonResponse(header_mutation=_runtime_mutation(extra, []))
        )
    )
    assert extproc.wire.response_headers(extra) == response.SerializeToString()
