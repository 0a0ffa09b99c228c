"""The ext_proc and gRPC health services on mmgate's own HTTP/2 layer (:mod:`mmgate.http.h2`).

gRPC over HTTP/2 as the picker's peers use it (the gRPC "PROTOCOL-HTTP2" document): a request is
a HEADERS frame with ``:path`` naming the method, then length-prefixed messages (one flag byte,
four length bytes, the protobuf) in DATA frames; the answer is HEADERS (``:status 200``,
``content-type: application/grpc``), the answer's messages, and trailers carrying
``grpc-status``. Envoy's ext_proc client opens one such stream per HTTP request and keeps it
open until the request ends.

Each ``Process`` stream drives one :class:`~mmgate.gateway.extproc.stream.RequestStream`
synchronously: a DATA frame's messages are parsed, answered and written in the same call, and
only a request that waits for an admission slot goes through a task (the messages behind it wait
in the stream's buffer, keeping their order). This is the transport ``mmgate extproc`` uses by
default; ``--grpc grpcio`` keeps the grpc.aio server (:mod:`.server`) for comparison.

What it does not do: compressed messages (the picker never advertises an encoding, so a peer
sends none; one that does gets ``UNIMPLEMENTED``), TLS (the picker sits beside its proxy, as
GIE's picker does in plaintext on the pod network), and the health service's ``Watch`` method
(``UNIMPLEMENTED``; Envoy and Kubernetes probes call ``Check``).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Final

from mmgate.gateway.extproc import wire
from mmgate.gateway.extproc.messages import Answer
from mmgate.gateway.extproc.stream import Malformed, RequestStream
from mmgate.gateway.server import Gateway
from mmgate.http import h2, hpack

log = logging.getLogger("mmgate.extproc")

PROCESS: Final = b"/envoy.service.ext_proc.v3.ExternalProcessor/Process"
HEALTH_CHECK: Final = b"/grpc.health.v1.Health/Check"
Buffer = bytes | memoryview
MAX_MESSAGE: Final = 64 * 1024 * 1024  # as the grpc.aio server's limit: a 20 MB body and room to spare

# gRPC status codes (grpc/doc/statuscodes.md)
OK: Final = 0
INVALID_ARGUMENT: Final = 3
NOT_FOUND: Final = 5
RESOURCE_EXHAUSTED: Final = 8
UNIMPLEMENTED: Final = 12
INTERNAL: Final = 13

# 0x88: ":status: 200", index 8 of the HPACK static table
RESPONSE_HEADERS: Final = b"\x88" + hpack.encode([(b"content-type", b"application/grpc")])
OK_TRAILERS: Final = hpack.encode([(b"grpc-status", b"0")])


def _status_trailers(code: int, message: str) -> bytes:
    return hpack.encode([(b"grpc-status", str(code).encode()), (b"grpc-message", message.encode())])


def _framed(payload: bytes) -> list[bytes]:
    """One gRPC message on the wire: not compressed, its length, the protobuf."""
    return [b"\x00" + len(payload).to_bytes(4, "big"), payload]


class MessageReader:
    """Length-prefixed gRPC messages out of a stream's DATA, in order, across frame boundaries.

    Each message comes out as its consecutive parts, views of the bytes read: one part when it
    lies inside one frame, several when it spans frames (Envoy sends a megabyte body message in
    16 KiB frames). Nothing is joined here; a reader that needs one buffer joins (the protobuf
    runtime), a body chunk's reader does not (:func:`.wire.body_chunk`)."""

    __slots__ = ("_have", "_need", "_parts")

    def __init__(self) -> None:
        self._parts: list[memoryview] = []
        self._have = 0
        self._need = -1  # the current message's size with its prefix, once its prefix is in

    def feed(self, data: Buffer) -> list[list[memoryview]]:
        view = memoryview(data)
        out: list[list[memoryview]] = []
        pos = 0
        if self._parts:
            need = self._need
            if need < 0:  # the 5-byte prefix itself was split
                prefix = b"".join(self._parts) + bytes(view[: 5 - self._have])
                if len(prefix) < 5:
                    self._parts.append(view)
                    self._have += len(view)
                    return out
                need = self._need = 5 + _length(prefix, 0)
            take = need - self._have
            if take > len(view):
                self._parts.append(view)
                self._have += len(view)
                return out
            self._parts.append(view[:take])
            out.append(_without_prefix(self._parts))
            self._parts = []
            self._have = 0
            self._need = -1
            pos = take
        size = len(view)
        while size - pos >= 5:
            length = _length(view, pos)
            if size - pos - 5 < length:
                self._need = 5 + length
                break
            out.append([view[pos + 5 : pos + 5 + length]])
            pos += 5 + length
        if pos < size:
            self._parts.append(view[pos:])
            self._have = size - pos
        return out


def _without_prefix(parts: list[memoryview]) -> list[memoryview]:
    """A message's parts without its 5-byte gRPC prefix (which may itself span parts)."""
    skip = 5
    while parts and skip:
        first = parts[0]
        if len(first) <= skip:
            skip -= len(first)
            del parts[0]
        else:
            parts[0] = first[skip:]
            skip = 0
    return [part for part in parts if len(part)]


def _joined(parts: list[memoryview]) -> Buffer:
    """A message's parts as one buffer (none for an empty message whose prefix spanned frames)."""
    return parts[0] if len(parts) == 1 else b"".join(parts)


_PREFIX: Final = struct.Struct(">BI")  # a message's prefix: compressed flag, length


def _length(data: Buffer, pos: int) -> int:
    """The length of the message whose 5-byte prefix starts at ``pos`` (read in one call: a
    view's items and slices are calls each in compiled code)."""
    compressed: int
    length: int
    compressed, length = _PREFIX.unpack_from(data, pos)
    if compressed:
        raise _Refused(UNIMPLEMENTED, "compressed messages are not accepted")
    if length > MAX_MESSAGE:
        raise _Refused(RESOURCE_EXHAUSTED, f"a message of {length} bytes")
    return length


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def framed(answers: list[Answer]) -> list[Buffer]:
    """The answers framed as gRPC messages, for one write: the small ones and the keys of a
    body-carrying one joined, the body's own bytes handed to the socket as they are."""
    parts: list[Buffer] = []
    small: list[Buffer] = []
    for answer in answers:
        if isinstance(answer, list):  # serialized as parts: keys and lengths, then body views
            size = 0
            for piece in answer:
                size += len(piece)
            small.append(b"\x00" + size.to_bytes(4, "big"))
            small.append(answer[0])
            if len(answer) > 1:
                parts.append(b"".join(small))
                small = []
                for piece in answer[1:]:
                    if len(piece) < 4096:
                        small.append(piece)
                    else:
                        if small:
                            parts.append(b"".join(small))
                            small = []
                        parts.append(piece)
            continue
        payload = answer if isinstance(answer, bytes) else answer.SerializeToString()
        small.append(b"\x00" + len(payload).to_bytes(4, "big"))
        if len(payload) < 4096:
            small.append(payload)
        else:
            parts.append(b"".join(small))
            parts.append(payload)
            small = []
    if small:
        parts.append(b"".join(small))
    return parts


class _ProcessStream:
    """One ``Process`` call: Envoy's messages for one HTTP request, answered in order."""

    __slots__ = ("_conn", "_id", "_messages", "_open", "_peer_done", "_queued", "_request", "_waiting")

    def __init__(self, conn: h2.Connection, stream_id: int, request: RequestStream) -> None:
        self._conn = conn
        self._id = stream_id
        self._request = request
        self._messages = MessageReader()
        self._queued: list[list[memoryview]] = []  # messages behind one that waits for admission
        self._waiting: asyncio.Task[None] | None = None
        self._peer_done = False
        self._open = True
        conn.send_headers(stream_id, RESPONSE_HEADERS)

    def on_data(self, data: Buffer, end: bool) -> None:
        if not self._open:
            return
        try:
            found = self._messages.feed(data) if data else []
        except _Refused as exc:
            self._fail(exc.code, str(exc))
            return
        if end:
            self._peer_done = True
        if self._waiting is not None:
            self._queued.extend(found)
            return
        self._handle(found)

    def _handle(self, found: list[list[memoryview]]) -> None:
        request = self._request
        for n, raw in enumerate(found):
            chunk = wire.body_chunk(raw)
            if chunk is not None:  # most messages: a body chunk, read without the runtime
                kind, data, end = chunk
                if kind == wire.REQUEST_CHUNK:
                    answers = request.request_chunk(data, end)
                else:
                    answers = request.response_chunk(data, end)
            else:
                try:
                    answers = request.on_serialized(_joined(raw))
                except Malformed:
                    self._fail(INVALID_ARGUMENT, "not a ProcessingRequest")
                    return
            if answers is None:  # waits for an admission slot; what follows waits behind it
                self._queued = found[n + 1 :]
                self._waiting = asyncio.get_running_loop().create_task(self._admitted())
                return
            if answers:
                self._send(answers)
        if self._peer_done:
            self._finish()

    async def _admitted(self) -> None:
        try:
            answers = await self._request.admitted()
        except asyncio.CancelledError:
            return
        self._waiting = None
        if not self._open:
            return
        self._send(answers)
        queued, self._queued = self._queued, []
        self._handle(queued)

    def _send(self, answers: list[Answer]) -> None:
        self._conn.send_data(self._id, framed(answers))

    def _finish(self) -> None:
        """Envoy ended the stream (the HTTP request is over): close the bookkeeping, answer OK."""
        self._open = False
        self._request.close()
        self._conn.send_headers(self._id, OK_TRAILERS, end=True)

    def _fail(self, code: int, message: str) -> None:
        self._open = False
        self._request.close()
        self._conn.send_headers(self._id, _status_trailers(code, message), end=True)

    def on_reset(self) -> None:
        """Envoy reset the stream (client gone, timeout) or the connection dropped."""
        self._open = False
        if self._waiting is not None:
            self._waiting.cancel()
        self._request.close()


class _HealthCheck:
    """One unary ``grpc.health.v1.Health/Check`` call."""

    __slots__ = ("_conn", "_id", "_messages", "_statuses")

    def __init__(self, conn: h2.Connection, stream_id: int, statuses: dict[str, int]) -> None:
        self._conn = conn
        self._id = stream_id
        self._messages = MessageReader()
        self._statuses = statuses

    def on_data(self, data: Buffer, end: bool) -> None:
        try:
            found = self._messages.feed(data) if data else []
        except _Refused:
            found = []
        if found:
            service = wire.health_service(_joined(found[0]))
            if service is None:
                _trailers_only(self._conn, self._id, INVALID_ARGUMENT, "not a HealthCheckRequest")
                return
            status = self._statuses.get(service)
            if status is None:
                _trailers_only(self._conn, self._id, NOT_FOUND, f"unknown service {service!r}")
                return
            answer = wire.health_answer(status)
            self._conn.send_headers(self._id, RESPONSE_HEADERS)
            self._conn.send_data(self._id, _framed(answer))
            self._conn.send_headers(self._id, OK_TRAILERS, end=True)
        elif end:
            _trailers_only(self._conn, self._id, INVALID_ARGUMENT, "no request message")

    def on_reset(self) -> None:
        pass


class _Ignored:
    """A stream already answered (an unknown method): its data is dropped."""

    def on_data(self, data: Buffer, end: bool) -> None:
        pass

    def on_reset(self) -> None:
        pass


def _trailers_only(conn: h2.Connection, stream_id: int, code: int, message: str) -> None:
    """gRPC's "Trailers-Only" answer: one HEADERS frame with the status, ending the stream."""
    conn.send_headers(stream_id, RESPONSE_HEADERS + _status_trailers(code, message), end=True)


def services(
    gateway: Gateway,
    statuses: dict[str, int],
    max_endpoints: int | None,
    on_lost: Callable[[h2.Connection], None] | None = None,
) -> Callable[[], h2.Connection]:
    """The protocol factory for ``loop.create_server``: each connection serves ``Process`` and
    ``Health/Check`` (``statuses``: service name -> ``HealthCheckResponse`` status, kept current
    by the caller; ``on_lost``: called with a connection once it is gone)."""

    def open_stream(conn: h2.Connection, stream_id: int, headers: list[hpack.Header], end: bool) -> h2.Stream:
        path = next((v for k, v in headers if k == b":path"), b"")
        if path == PROCESS:
            stream: h2.Stream = _ProcessStream(conn, stream_id, RequestStream(gateway, max_endpoints))
        elif path == HEALTH_CHECK:
            stream = _HealthCheck(conn, stream_id, statuses)
        else:
            _trailers_only(conn, stream_id, UNIMPLEMENTED, f"unknown method {path.decode('latin-1')}")
            return _Ignored()
        if end:
            stream.on_data(b"", True)
        return stream

    return lambda: h2.Connection(open_stream, on_lost)
