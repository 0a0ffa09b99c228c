"""The HTTP/2 server connection, driven byte by byte as a peer would drive it: stream opening,
flow control in both directions, PING, and connection errors."""

from __future__ import annotations

import struct

import pytest

from mmgate.http import h2
from mmgate.http.hpack import Header, encode


class Transport:
    """Collects what the connection writes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, pieces: list[bytes | memoryview]) -> None:
        for piece in pieces:
            self.data += piece

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> None:
        return None

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        out, data = [], bytes(self.data)
        self.data.clear()
        while data:
            length = int.from_bytes(data[:3], "big")
            kind, flags, stream_id = data[3], data[4], int.from_bytes(data[5:9], "big")
            out.append((kind, flags, stream_id, data[9 : 9 + length]))
            data = data[9 + length :]
        return out


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_data(self, data: bytes | memoryview, end: bool) -> None:
        self.events.append(("data", (bytes(data), end)))

    def on_reset(self) -> None:
        self.events.append(("reset", None))


def connect() -> tuple[h2.Connection, Transport, dict[int, tuple[list[Header], Recorder]]]:
    opened: dict[int, tuple[list[Header], Recorder]] = {}

    def open_stream(conn: h2.Connection, stream_id: int, headers: list[Header], end: bool) -> Recorder:
        recorder = Recorder()
        opened[stream_id] = (headers, recorder)
        return recorder

    conn = h2.Connection(open_stream)
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport, opened


def settings(*pairs: tuple[int, int]) -> bytes:
    return h2.frame(h2.SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


REQUEST = [(b":method", b"POST"), (b":path", b"/svc/Method"), (b"content-type", b"application/grpc")]


@pytest.mark.parametrize("read", [1, 7, 9, 10, 40, 1000])
def test_a_stream_opens_with_its_headers_and_its_data_arrives_across_reads(read: int) -> None:
    conn, transport, opened = connect()
    kinds = [f[0] for f in transport.frames()]
    assert kinds == [h2.SETTINGS, h2.WINDOW_UPDATE]  # this side's settings, a wide connection window
    wire = (
        h2.PREFACE
        + settings()
        + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, encode(REQUEST))
        + h2.frame(h2.DATA, 0, 1, b"hello ")
        + h2.frame(h2.DATA, h2.END_STREAM, 1, b"world")
    )
    for i in range(0, len(wire), read):  # arbitrary read boundaries
        conn.data_received(wire[i : i + read])
    headers, recorder = opened[1]
    assert headers == REQUEST
    assert recorder.events == [("data", (b"hello ", False)), ("data", (b"world", True))]
    assert [(f[0], f[1]) for f in transport.frames()] == [(h2.SETTINGS, h2.ACK)]


def test_sending_waits_for_the_peer_s_windows_and_resumes_on_window_update() -> None:
    conn, transport, _ = connect()
    conn.data_received(h2.PREFACE + settings((h2.INITIAL_WINDOW_SIZE, 10)))
    conn.data_received(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, encode(REQUEST)))
    transport.frames()
    conn.send_data(1, [b"0123456789abcdef", b"ghijklmnop"], end=True)
    [(kind, flags, stream_id, payload)] = transport.frames()
    assert (kind, flags, stream_id, payload) == (h2.DATA, 0, 1, b"0123456789")
    conn.data_received(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">I", 100)))
    [(kind, flags, _, payload)] = transport.frames()
    assert (kind, flags, payload) == (h2.DATA, h2.END_STREAM, b"abcdefghijklmnop")


def test_trailers_wait_behind_the_data_the_window_holds_back() -> None:
    conn, transport, _ = connect()
    conn.data_received(h2.PREFACE + settings((h2.INITIAL_WINDOW_SIZE, 4)))
    conn.data_received(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, encode(REQUEST)))
    transport.frames()
    conn.send_data(1, [b"12345678"])
    conn.send_headers(1, encode([(b"grpc-status", b"0")]), end=True)
    assert [f[0] for f in transport.frames()] == [h2.DATA]
    conn.data_received(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">I", 4)))
    assert [(f[0], f[1], f[3]) for f in transport.frames()] == [
        (h2.DATA, 0, b"5678"),
        (h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, encode([(b"grpc-status", b"0")])),
    ]


def test_ping_is_answered_and_a_reset_reaches_the_stream() -> None:
    conn, transport, opened = connect()
    conn.data_received(h2.PREFACE + settings() + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, encode(REQUEST)))
    transport.frames()
    conn.data_received(h2.frame(h2.PING, 0, 0, b"12345678") + h2.frame(h2.RST_STREAM, 0, 1, b"\0\0\0\x08"))
    assert transport.frames() == [(h2.PING, h2.ACK, 0, b"12345678")]
    assert opened[1][1].events == [("reset", None)]


def test_a_connection_that_does_not_speak_http2_is_closed_with_goaway() -> None:
    conn, transport, _ = connect()
    transport.frames()
    conn.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    [(kind, _, _, payload)] = transport.frames()
    assert kind == h2.GOAWAY and int.from_bytes(payload[4:8], "big") == h2.PROTOCOL_ERROR
    assert transport.closed


def test_a_header_block_interrupted_by_another_frame_is_a_protocol_error() -> None:
    conn, transport, _ = connect()
    conn.data_received(h2.PREFACE + settings())
    transport.frames()
    conn.data_received(h2.frame(h2.HEADERS, 0, 1, encode(REQUEST)) + h2.frame(h2.DATA, 0, 1, b"x"))
    [(kind, _, _, payload)] = transport.frames()
    assert kind == h2.GOAWAY and int.from_bytes(payload[4:8], "big") == h2.PROTOCOL_ERROR


def test_a_graceful_goaway_keeps_answering_what_the_peer_sent_and_close_names_the_last_stream() -> None:
    conn, transport, opened = connect()
    conn.data_received(h2.PREFACE + settings() + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, encode(REQUEST)))
    transport.frames()
    conn.goaway()
    [(kind, _, stream_id, payload)] = transport.frames()
    assert (kind, stream_id) == (h2.GOAWAY, 0)
    assert struct.unpack(">II", payload) == (0x7FFF_FFFF, h2.NO_ERROR)  # RFC 9113 §6.8's first GOAWAY
    assert not transport.closed and not conn.idle
    conn.data_received(h2.frame(h2.HEADERS, h2.END_HEADERS, 3, encode(REQUEST)))  # crossed the GOAWAY
    assert set(opened) == {1, 3}
    for stream_id in (1, 3):
        conn.send_headers(stream_id, encode([(b"grpc-status", b"0")]), end=True)
    assert conn.idle
    transport.frames()
    conn.close()
    [(kind, _, _, payload)] = transport.frames()
    assert kind == h2.GOAWAY and struct.unpack(">II", payload[:8]) == (3, h2.NO_ERROR)
    assert transport.closed


def test_a_frame_larger_than_this_side_allows_is_refused_even_when_its_header_arrives_split() -> None:
    conn, transport, _ = connect()
    conn.data_received(h2.PREFACE + settings())
    transport.frames()
    header = (h2.OUR_MAX_FRAME + 1).to_bytes(3, "big") + bytes((h2.DATA, 0)) + (1).to_bytes(4, "big")
    conn.data_received(header[:2])  # the frame's length itself is split over two reads
    conn.data_received(header[2:])
    [(kind, _, _, payload)] = transport.frames()
    assert kind == h2.GOAWAY and int.from_bytes(payload[4:8], "big") == h2.FRAME_SIZE_ERROR
    assert transport.closed


def test_a_lost_connection_tells_its_owner_and_resets_its_streams() -> None:
    lost: list[h2.Connection] = []
    opened: list[Recorder] = []

    def open_stream(conn: h2.Connection, stream_id: int, headers: list[Header], end: bool) -> Recorder:
        opened.append(Recorder())
        return opened[-1]

    conn = h2.Connection(open_stream, lost.append)
    conn.connection_made(Transport())  # type: ignore[arg-type]
    conn.data_received(h2.PREFACE + settings() + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, encode(REQUEST)))
    conn.connection_lost(None)
    assert lost == [conn]
    assert opened[0].events == [("reset", None)]
