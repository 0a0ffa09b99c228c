"""A lean HTTP/2 server connection (RFC 7540/9113) on an asyncio Protocol, for gRPC peers.

Written for one job: serving a proxy that opens a few long-lived connections and many short
streams on them (Envoy's gRPC client to an external processor). It does what such a peer needs
and nothing else: the connection preface and SETTINGS exchange, HEADERS with CONTINUATION,
DATA, flow control both ways, PING, RST_STREAM, GOAWAY, WINDOW_UPDATE; PRIORITY is read and
ignored (RFC 9113 deprecates it), server push is never used, and padding is stripped.

Why not a library: per message, a generic HTTP/2 stack (or grpc.aio's wrapper around gRPC's C
core) costs tens of microseconds of Python in queues, futures and callbacks; here a DATA frame
goes from ``data_received`` to the stream's handler in one call, and an answer goes out as one
``transport.write``. The application sees :class:`Stream` callbacks and sends with
:meth:`Connection.send_headers` / :meth:`Connection.send_data`.

Receiving flow control: this side advertises the largest windows (2^31-1) and returns what it
consumed in WINDOW_UPDATEs once half a window is used, so a peer never waits on it. Sending: the
peer's windows are honoured (llm-d's Envoy advertises 64 KiB per stream); data beyond them waits
in the stream's queue until the peer's WINDOW_UPDATE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, Protocol, cast

from mmgate.http.hpack import Decoder, Header, HpackError

log = logging.getLogger("mmgate.h2")

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# frame types (RFC 9113 §6)
DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20
# error codes (RFC 9113 §7)
NO_ERROR: Final = 0
PROTOCOL_ERROR: Final = 1
INTERNAL_ERROR: Final = 2
FLOW_CONTROL_ERROR: Final = 3
STREAM_CLOSED: Final = 5
FRAME_SIZE_ERROR: Final = 6
REFUSED_STREAM: Final = 7
CANCEL: Final = 8
COMPRESSION_ERROR: Final = 9
# settings
HEADER_TABLE_SIZE: Final = 1
ENABLE_PUSH: Final = 2
MAX_CONCURRENT_STREAMS: Final = 3
INITIAL_WINDOW_SIZE: Final = 4
MAX_FRAME_SIZE: Final = 5
MAX_HEADER_LIST_SIZE: Final = 6

MAX_WINDOW: Final = 2**31 - 1
OUR_MAX_FRAME: Final = 1 << 20  # DATA frames up to 1 MiB from the peer: fewer frames per body
OUR_MAX_STREAMS: Final = 10_000
MAX_HEADER_BLOCK: Final = 256 * 1024


def frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    """One frame: the 9-byte header (RFC 9113 §4.1) then ``payload``."""
    length = len(payload)
    return (
        bytes((length >> 16 & 0xFF, length >> 8 & 0xFF, length & 0xFF, kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


class ConnectionError_(Exception):
    """A connection error (RFC 9113 §5.4.1): GOAWAY with ``code``, then close."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Stream(Protocol):
    """What the application does with one request stream's events."""

    def on_data(self, data: bytes | memoryview, end: bool) -> None:
        """Body bytes (``end``: the peer half-closed the stream with them); a view of the bytes
        read, valid as long as the callee keeps it."""

    def on_reset(self) -> None:
        """The peer reset the stream, or the connection is gone: nothing more will be sent."""


OpenStream = Callable[["Connection", int, list[Header], bool], Stream]
"""Called on each new request stream with its id, headers and whether the peer already ended it."""


class _Out:
    """A stream's sending side: the peer's window and what waits for it."""

    __slots__ = ("closed", "queue", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.queue: deque[tuple[int, memoryview | bytes, int]] = deque()  # (kind, payload, flags)
        self.closed = False


class Connection(asyncio.Protocol):
    """One HTTP/2 connection, server side."""

    def __init__(self, open_stream: OpenStream, on_lost: Callable[[Connection], None] | None = None) -> None:
        """``on_lost`` is called with this connection once its transport is gone (a server that
        tracks its open connections forgets it there)."""
        self._open_stream = open_stream
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._preface_buffer = bytearray()
        self._preface = False
        self._pending: list[memoryview] = []  # a frame's first bytes, read but not yet complete
        self._pending_size = 0
        self._decoder = Decoder()
        self._streams: dict[int, Stream] = {}
        self._out: dict[int, _Out] = {}
        self._last_stream = 0
        self._peer_window = 65_535  # the connection's sending window
        self._peer_initial = 65_535  # each new stream's sending window
        self._peer_max_frame = 16_384
        self._consumed = 0  # received DATA bytes not yet returned in a WINDOW_UPDATE
        self._stream_consumed: dict[int, int] = {}
        self._headers_stream = 0  # a header block in progress (CONTINUATION expected)
        self._headers_flags = 0
        self._headers_block = bytearray()
        self._closing = False
        self._held: list[bytes | memoryview] | None = None  # writes held while frames are read

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:  # answers are small frames written as they are ready: no Nagle delay
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        settings = struct.pack(
            ">HIHIHIHI",
            INITIAL_WINDOW_SIZE, MAX_WINDOW,
            MAX_FRAME_SIZE, OUR_MAX_FRAME,
            MAX_CONCURRENT_STREAMS, OUR_MAX_STREAMS,
            ENABLE_PUSH, 0,
        )  # fmt: skip
        update = struct.pack(">I", MAX_WINDOW - 65_535)
        self.transport.write(frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, update))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_lost is not None:
            self._on_lost(self)
        streams = list(self._streams.values())
        self._streams.clear()
        self._out.clear()
        for stream in streams:
            stream.on_reset()

    def data_received(self, data: bytes) -> None:
        """Every frame in ``data`` handled, and everything they caused written in one call."""
        self._held = held = cast(list[bytes | memoryview], [])
        try:
            self._receive(data)
        finally:
            self._held = None
            if held and self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(held)

    def _receive(self, data: bytes) -> None:
        if not self._preface:
            data = self._read_preface(data)
            if not data:
                return
        start = 0
        if self._pending:  # a frame begun in an earlier read
            start = self._complete(data)
            if start < 0 or self._closing:
                return
        pos = self._frames(data, start)
        if pos < len(data) and not self._closing:
            # The start of the next frame: kept as a view (no copy) until the read that ends it.
            self._pending.append(memoryview(data)[pos:])
            self._pending_size = len(data) - pos

    def _read_preface(self, data: bytes) -> bytes:
        """The client's connection preface (RFC 9113 §3.4) out of the first reads; what follows it."""
        buffer = self._preface_buffer
        buffer += data
        if len(buffer) < len(PREFACE):
            return b""
        if buffer[: len(PREFACE)] != PREFACE:
            self.close(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
            return b""
        self._preface = True
        rest = bytes(buffer[len(PREFACE) :])
        buffer.clear()
        return rest

    def _complete(self, data: bytes) -> int:
        """Add ``data`` to a frame begun in earlier reads: where the frames after it start in
        ``data`` once it is complete (and handled), -1 while it is not. Only that one frame is
        copied out of the reads, never the bytes after it."""
        pending = self._pending
        have = self._pending_size
        if have < 9:  # even the frame header is split
            head = b"".join(pending) + data[: 9 - have]
            if len(head) < 9:
                pending.append(memoryview(data))
                self._pending_size += len(data)
                return -1
        else:
            head = bytes(pending[0][:9]) if len(pending[0]) >= 9 else b"".join(pending)[:9]
        need = 9 + (head[0] << 16 | head[1] << 8 | head[2])
        if need > 9 + OUR_MAX_FRAME:
            self.close(FRAME_SIZE_ERROR, f"frame of {need - 9} bytes")
            return -1
        if have + len(data) < need:
            pending.append(memoryview(data))
            self._pending_size += len(data)
            return -1
        take = need - have
        pending.append(memoryview(data)[:take])
        whole = b"".join(pending)
        pending.clear()
        self._pending_size = 0
        if self._frames(whole, 0) != len(whole):  # checks the length (and handles the frame)
            return len(data)
        return take

    def _frames(self, data: bytes, pos: int) -> int:
        """Handle every complete frame in ``data`` from ``pos``; the offset of the first
        incomplete one (``len(data)`` once the connection is closing)."""
        size = len(data)
        view = memoryview(data)  # frame payloads are views of the bytes read: no copy per frame
        try:
            while size - pos >= 9:
                length = data[pos] << 16 | data[pos + 1] << 8 | data[pos + 2]
                if length > OUR_MAX_FRAME:
                    raise ConnectionError_(FRAME_SIZE_ERROR, f"frame of {length} bytes")
                if size - pos < 9 + length:
                    break
                kind = data[pos + 3]
                flags = data[pos + 4]
                # indexing ``bytes`` compiles to a load; a slice and int.from_bytes are calls
                stream_id = (
                    (data[pos + 5] & 0x7F) << 24 | data[pos + 6] << 16 | data[pos + 7] << 8 | data[pos + 8]
                )
                payload = view[pos + 9 : pos + 9 + length]
                pos += 9 + length
                self._frame(kind, flags, stream_id, payload)
                if self._closing:
                    return size
        except ConnectionError_ as exc:
            self.close(exc.code, str(exc))
            return size
        return pos

    # -- receiving ---------------------------------------------------------------------------------

    def _frame(self, kind: int, flags: int, stream_id: int, payload: memoryview) -> None:
        if self._headers_stream and kind != CONTINUATION:
            raise ConnectionError_(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == DATA:
            self._data(flags, stream_id, payload)
        elif kind == HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == CONTINUATION:
            if stream_id != self._headers_stream or not stream_id:
                raise ConnectionError_(PROTOCOL_ERROR, "CONTINUATION without HEADERS")
            self._headers_block += payload
            if len(self._headers_block) > MAX_HEADER_BLOCK:
                raise ConnectionError_(PROTOCOL_ERROR, "header block too large")
            if flags & END_HEADERS:
                self._header_block_done()
        elif kind == SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == PING:
            if len(payload) != 8:
                raise ConnectionError_(FRAME_SIZE_ERROR, "PING of the wrong size")
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, bytes(payload)))
        elif kind == RST_STREAM:
            if not stream_id:
                raise ConnectionError_(PROTOCOL_ERROR, "RST_STREAM on stream 0")
            self._forget(stream_id, reset=True)
        elif kind == PUSH_PROMISE:
            raise ConnectionError_(PROTOCOL_ERROR, "a client cannot push")
        # GOAWAY (the peer opens nothing new; what is open finishes), PRIORITY and unknown frame
        # types need nothing (RFC 9113 §5.5)

    def _strip_padding(self, flags: int, payload: memoryview) -> memoryview:
        if flags & PADDED:
            if not payload or payload[0] >= len(payload):
                raise ConnectionError_(PROTOCOL_ERROR, "bad padding")
            return payload[1 : len(payload) - payload[0]]
        return payload

    def _data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        received = len(payload)
        self._consumed += received
        if self._consumed >= MAX_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._consumed)))
            self._consumed = 0
        stream = self._streams.get(stream_id)
        if stream is None:
            if not stream_id or stream_id > self._last_stream:
                raise ConnectionError_(PROTOCOL_ERROR, "DATA on a stream never opened")
            return  # a stream this side already closed or reset: the data is dropped
        used = self._stream_consumed.get(stream_id, 0) + received
        if used >= MAX_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", used)))
            used = 0
        self._stream_consumed[stream_id] = used
        data = self._strip_padding(flags, payload)
        end = bool(flags & END_STREAM)
        stream.on_data(data, end)

    def _headers(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if not stream_id or stream_id % 2 == 0:
            raise ConnectionError_(PROTOCOL_ERROR, "HEADERS on a server stream id")
        payload = self._strip_padding(flags, payload)
        if flags & PRIORITY_FLAG:
            payload = payload[5:]
        self._headers_stream = stream_id
        self._headers_flags = flags
        self._headers_block = bytearray(payload)
        if flags & END_HEADERS:
            self._header_block_done()

    def _header_block_done(self) -> None:
        stream_id, flags = self._headers_stream, self._headers_flags
        self._headers_stream = 0
        try:
            headers = self._decoder.decode(bytes(self._headers_block))
        except HpackError as exc:
            raise ConnectionError_(COMPRESSION_ERROR, str(exc)) from None
        end = bool(flags & END_STREAM)
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers
            stream.on_data(b"", end)
            return
        if stream_id <= self._last_stream:
            return  # trailers of a stream this side already finished
        self._last_stream = stream_id
        if len(self._streams) >= OUR_MAX_STREAMS:
            self._write(frame(RST_STREAM, 0, stream_id, struct.pack(">I", REFUSED_STREAM)))
            return
        self._out[stream_id] = _Out(self._peer_initial)
        self._streams[stream_id] = self._open_stream(self, stream_id, headers, end)

    def _settings(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            return
        if len(payload) % 6:
            raise ConnectionError_(FRAME_SIZE_ERROR, "SETTINGS of the wrong size")
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionError_(FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._peer_initial
                self._peer_initial = value
                for out in self._out.values():
                    out.window += delta
            elif key == MAX_FRAME_SIZE:
                if not 16_384 <= value <= 16_777_215:
                    raise ConnectionError_(PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE")
                self._peer_max_frame = value
            # HEADER_TABLE_SIZE concerns the peer's decoder: this side never indexes what it sends
        self._write(frame(SETTINGS, ACK, 0))
        self._flush_all()

    def _window_update(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ConnectionError_(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not increment:
            raise ConnectionError_(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        if stream_id:
            out = self._out.get(stream_id)
            if out is not None:
                out.window += increment
                self._flush(stream_id, out)
            return
        self._peer_window += increment
        if self._peer_window > MAX_WINDOW:
            raise ConnectionError_(FLOW_CONTROL_ERROR, "connection window above 2^31-1")
        self._flush_all()

    # -- sending -----------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send_headers(self, stream_id: int, block: bytes, *, end: bool = False) -> None:
        """A header block (response headers, or trailers with ``end``), after any queued data."""
        out = self._out.get(stream_id)
        if out is None or out.closed:
            return
        flags = END_HEADERS | (END_STREAM if end else 0)
        if out.queue:
            out.queue.append((HEADERS, block, flags))
        else:
            self._write(frame(HEADERS, flags, stream_id, block))
        if end:
            out.closed = True
            self._maybe_done(stream_id, out)

    def send_data(self, stream_id: int, pieces: Sequence[bytes | memoryview], *, end: bool = False) -> None:
        """Body bytes (``pieces``, in order: written as they are, never joined), sent as far as
        the peer's windows allow now, the rest when they open. A DATA frame may span pieces."""
        out = self._out.get(stream_id)
        if out is None or out.closed:
            return
        queue = out.queue
        for piece in pieces:
            if len(piece):
                queue.append((DATA, piece, 0))
        if end:
            queue.append((DATA, b"", END_STREAM))
            out.closed = True
        self._flush(stream_id, out)

    def reset(self, stream_id: int, code: int = CANCEL) -> None:
        """This side abandons the stream (RST_STREAM)."""
        if stream_id in self._out:
            self._write(frame(RST_STREAM, 0, stream_id, struct.pack(">I", code)))
            self._forget(stream_id, reset=False)

    def _flush_all(self) -> None:
        for stream_id, out in list(self._out.items()):
            if out.queue:
                self._flush(stream_id, out)
                if self._peer_window <= 0:
                    return

    def _flush(self, stream_id: int, out: _Out) -> None:
        queue = out.queue
        frames: list[bytes | memoryview] = []
        sid = stream_id.to_bytes(4, "big")
        while queue:
            kind, payload, flags = queue[0]
            if kind == HEADERS:
                frames.append(frame(HEADERS, flags, stream_id, bytes(payload)))
                queue.popleft()
                continue
            # One DATA frame: as many queued bytes as the windows and the frame size allow.
            room = out.window
            if self._peer_window < room:
                room = self._peer_window
            if self._peer_max_frame < room:
                room = self._peer_max_frame
            body: list[bytes | memoryview] = []
            taken = 0
            end = 0
            while queue:
                item = queue[0]
                if item[0] != DATA:
                    break
                payload = item[1]
                size = len(payload)
                if not size:  # the end marker
                    end = item[2]
                    queue.popleft()
                    break
                take = room - taken
                if not take:
                    break
                if take >= size:
                    body.append(payload)
                    queue.popleft()
                    taken += size
                else:
                    view = memoryview(payload)
                    body.append(view[:take])
                    queue[0] = (DATA, view[take:], 0)
                    taken += take
            if not taken and not end:
                break  # the windows are shut: the peer's WINDOW_UPDATE resumes
            frames.append(bytes((taken >> 16, taken >> 8 & 0xFF, taken & 0xFF, DATA, end)) + sid)
            frames.extend(body)
            out.window -= taken
            self._peer_window -= taken
        if not frames:
            pass
        elif self._held is not None:
            self._held.extend(frames)
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(frames)
        self._maybe_done(stream_id, out)

    def _maybe_done(self, stream_id: int, out: _Out) -> None:
        """A stream this side ended and fully sent: forgotten when the peer has ended it too
        (or at once: a server answers after the request, and late DATA is dropped)."""
        if out.closed and not out.queue:
            self._forget(stream_id, reset=False)

    def _forget(self, stream_id: int, *, reset: bool) -> None:
        self._out.pop(stream_id, None)
        self._stream_consumed.pop(stream_id, None)
        stream = self._streams.pop(stream_id, None)
        if reset and stream is not None:
            stream.on_reset()

    @property
    def idle(self) -> bool:
        """No stream open (none the peer opened is still being answered)."""
        return not self._streams and not self._out

    def goaway(self) -> None:
        """The first GOAWAY of a graceful shutdown (RFC 9113 §6.8): NO_ERROR with the last stream
        identifier 2^31-1, so the peer opens no new stream here while every stream it has already
        sent, even one crossing this frame, is still answered; :meth:`close` ends the connection
        later with the real last identifier."""
        if not self._closing:
            self._write(frame(GOAWAY, 0, 0, struct.pack(">II", 0x7FFF_FFFF, NO_ERROR)))

    def close(self, code: int = NO_ERROR, message: str = "") -> None:
        """GOAWAY with ``code``, then close the connection (open streams see a reset)."""
        if self._closing:
            return
        self._closing = True
        if code != NO_ERROR:
            log.warning("closing an HTTP/2 connection", extra={"fields": {"code": code, "why": message}})
        payload = struct.pack(">II", self._last_stream, code) + message.encode()[:200]
        held, self._held = self._held, None
        self._write(b"".join([*(held or ()), frame(GOAWAY, 0, 0, payload)]))
        if held:
            held.clear()  # written here, not again when data_received returns
        if self.transport is not None:
            self.transport.close()
