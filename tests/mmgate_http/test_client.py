"""The upstream HTTP/1.1 pool against scripted loopback servers: framing, streaming, keep-alive."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from mmgate.http.client import SMALL_BODY, Body
from mmgate.request.pieces import BodyPieces
from support.h1 import Peer, fetch, make_pool, ok, raw_server, read_all


async def test_content_length_response_and_request_framing() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(peer: Peer) -> None:
        seen.append(await peer.read_request())
        await peer.send(ok(b"hello", "X-Upstream: one", "x-upstream: two"))

    async with raw_server(handler) as server:
        pool = make_pool()
        headers = [("Content-Type", "application/json"), ("Authorization", "Bearer k")]
        response = await pool.request("127.0.0.1", server.port, "POST", "/v1/chat", headers, b'{"a":1}')
        assert response.status == 200
        assert response.headers == [("X-Upstream", "one"), ("x-upstream", "two"), ("Content-Length", "5")]
        assert await read_all(response) == b"hello"
        response.release()
        await pool.close()

    head, body = seen[0]
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert "Content-Length: 7" in lines
    assert lines.index("Content-Type: application/json") < lines.index("Authorization: Bearer k")
    assert body == b'{"a":1}'


async def test_chunked_body_is_decoded() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await peer.send(b"6\r\n world\r\n0\r\n\r\n")
        await peer.read_request()
        await peer.send(ok(b"again"))

    async with raw_server(handler) as server:
        pool = make_pool()
        assert await fetch(pool, server) == b"hello world"
        assert await fetch(pool, server) == b"again"
        assert server.accepted == 1
        await pool.close()


async def test_close_delimited_body_ends_at_eof_and_is_not_reused() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
        await asyncio.sleep(0.02)
        await peer.send(b"the end")
        await peer.close()

    async with raw_server(handler) as server:
        pool = make_pool()
        for _ in range(2):
            assert await fetch(pool, server) == b"until the end"
        assert server.accepted == 2
        await pool.close()


async def test_sse_pieces_arrive_one_by_one() -> None:
    first_read = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await peer.send(b"e\r\ndata: token1\n\n\r\n")
        await first_read.wait()  # the next event is only sent once the client has the first one
        await asyncio.sleep(0.02)
        await peer.send(b"e\r\ndata: token2\n\n\r\n")
        await asyncio.sleep(0.02)
        await peer.send(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "POST", "/v1/chat", [], b"{}")
        assert await response.read() == b"data: token1\n\n"
        first_read.set()
        assert await response.read() == b"data: token2\n\n"
        assert await response.read() == b"data: [DONE]\n\n"
        assert await response.read() == b""
        response.release()
        await pool.close()


async def test_keep_alive_connection_is_reused() -> None:
    async def handler(peer: Peer) -> None:
        while True:
            _, body = await peer.read_request()
            await peer.send(ok(body.upper()))

    async with raw_server(handler) as server:
        pool = make_pool()
        for word in (b"one", b"two", b"three"):
            assert await fetch(pool, server, "POST", word) == word.upper()
        assert server.accepted == 1
        await pool.close()


async def test_unread_body_is_never_reused() -> None:
    async def handler(peer: Peer) -> None:
        while True:
            await peer.read_request()
            await peer.send(ok(b"x" * 100))

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        response.release()  # released without reading the body
        assert await fetch(pool, server) == b"x" * 100
        assert server.accepted == 2
        await pool.close()


async def test_interim_100_continue_is_skipped() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        await asyncio.sleep(0.01)
        await peer.send(b"HTTP/1.1 201 Created\r\nX-Final: yes\r\nContent-Length: 2\r\n\r\nok")

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "POST", "/", [], b"{}")
        assert response.status == 201
        assert response.headers[0] == ("X-Final", "yes")
        assert await read_all(response) == b"ok"
        response.release()
        await pool.close()


async def test_interim_responses_are_handed_to_the_caller_before_the_final_head() -> None:
    """Two 103s then the answer: each interim head reaches ``on_interim`` as it arrives (the
    second while the request still waits), none of their headers leak into the final head."""
    seen: list[tuple[int, list[tuple[str, str]]]] = []
    go = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 103 Early Hints\r\nX-Done: enc-0\r\n\r\n")
        await go.wait()
        await peer.send(b"HTTP/1.1 103 Early Hints\r\nX-Done: enc-1\r\nX-Also: 2\r\n\r\n")
        await peer.send(ok(b"ok", "X-Final: yes"))
        await peer.read_request()
        await peer.send(b"HTTP/1.1 103 Early Hints\r\nX-Done: enc-2\r\n\r\n" + ok(b"again"))

    def interim(status: int, headers: list[tuple[str, str]]) -> None:
        seen.append((status, headers))
        go.set()

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "POST", "/", [], b"{}", on_interim=interim)
        assert seen == [(103, [("X-Done", "enc-0")]), (103, [("X-Done", "enc-1"), ("X-Also", "2")])]
        assert response.status == 200
        assert response.headers == [("X-Final", "yes"), ("Content-Length", "2")]
        assert await read_all(response) == b"ok"
        response.release()
        # The next exchange on the same connection, without a callback, hears of none.
        seen.clear()
        assert await fetch(pool, server) == b"again"
        assert seen == [] and server.accepted == 1
        await pool.close()


@pytest.mark.parametrize(
    "status_and_headers",
    [b"HTTP/1.1 200 OK\r\nConnection: close", b"HTTP/1.0 200 OK"],
    ids=["connection-close", "http-1.0"],
)
async def test_connection_close_is_not_reused(status_and_headers: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(status_and_headers + b"\r\nContent-Length: 2\r\n\r\nok")
        await peer.at_eof(timeout=5)  # the server leaves it to the client to close

    async with raw_server(handler) as server:
        pool = make_pool()
        for _ in range(2):
            assert await fetch(pool, server) == b"ok"
        assert server.accepted == 2
        await pool.close()


async def test_idle_connection_past_the_idle_timeout_is_closed() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(b"ok"))
        peer_closed[peer.index] = await peer.at_eof(timeout=2)

    peer_closed: dict[int, bool] = {}
    async with raw_server(handler) as server:
        pool = make_pool(idle_timeout_s=0.1)
        assert await fetch(pool, server) == b"ok"
        await asyncio.sleep(0.35)
        assert peer_closed == {0: True}  # the pool closed it while idle
        assert await fetch(pool, server) == b"ok"
        assert server.accepted == 2
        await pool.close()


async def test_max_idle_per_origin_closes_the_surplus() -> None:
    both_in = asyncio.Event()
    arrived = 0
    closed: list[bool] = []

    async def handler(peer: Peer) -> None:
        nonlocal arrived
        await peer.read_request()
        arrived += 1
        if arrived == 2:
            both_in.set()
        await both_in.wait()
        await peer.send(ok(b"ok"))
        closed.append(await peer.at_eof(timeout=0.5))

    async with raw_server(handler) as server:
        pool = make_pool(max_idle_per_origin=1)
        responses = await asyncio.gather(
            *(pool.request("127.0.0.1", server.port, "GET", "/", [], b"") for _ in range(2))
        )
        for response in responses:
            assert await read_all(response) == b"ok"
            response.release()
        async with asyncio.timeout(5):
            while len(closed) < 2:
                await asyncio.sleep(0.02)
        assert sorted(closed) == [False, True]  # one kept idle, the oldest closed
        await pool.close()


async def test_slow_reader_keeps_the_buffer_bounded() -> None:
    payload = os.urandom(24 * 1024 * 1024)

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(payload))

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        await asyncio.sleep(0.3)  # without back-pressure the whole body would be buffered by now
        first = await response.read()
        assert 0 < len(first) <= 2 * 1024 * 1024  # about READ_HIGH_WATER plus one socket read
        rest = await read_all(response)
        assert hashlib.sha256(first + rest).digest() == hashlib.sha256(payload).digest()
        response.release()
        await pool.close()


def _pieces(original: bytes) -> tuple[BodyPieces, bytes]:
    """``original`` as a spliced body holds it: memoryview slices around two insertions."""
    cut = len(original) // 3
    body = BodyPieces(original, [(cut, b',"uuid":"1"'), (2 * cut, b',"uuid":"2"')])
    return body, original[:cut] + b',"uuid":"1"' + original[cut : 2 * cut] + b',"uuid":"2"' + original[
        2 * cut :
    ]


@pytest.mark.parametrize("kind", ["memoryview", "bytearray", "bytes", "pieces"])
async def test_large_body_is_sent_intact(kind: str) -> None:
    payload = os.urandom(6 * 1024 * 1024 + 17)
    body: Body
    if kind == "pieces":
        body, payload = _pieces(payload)
    else:
        body = {"memoryview": memoryview(payload), "bytearray": bytearray(payload), "bytes": payload}[kind]
    assert len(body) > SMALL_BODY

    async def handler(peer: Peer) -> None:
        _, received = await peer.read_request()
        await peer.send(ok(hashlib.sha256(received).hexdigest().encode()))

    async with raw_server(handler) as server:
        pool = make_pool()
        assert await fetch(pool, server, "POST", body) == hashlib.sha256(payload).hexdigest().encode()
        await pool.close()


async def test_head_request_completes_without_a_body() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
        await peer.at_eof()

    async with raw_server(handler) as server:
        pool = make_pool(read_timeout_s=0.5)
        response = await pool.request("127.0.0.1", server.port, "HEAD", "/", [], b"")
        assert response.status == 200
        assert await response.read() == b""
        response.release()
        await pool.close()


async def test_slow_upload_is_not_a_read_timeout() -> None:
    payload = os.urandom(24 * 1024 * 1024)

    async def handler(peer: Peer) -> None:
        head = await peer.reader.readuntil(b"\r\n\r\n")
        assert b"Content-Length: %d" % len(payload) in head
        digest = hashlib.sha256()
        left = len(payload)
        while left:  # ~12 MB/s: the body takes ~2 s, over two read timeouts, to go out
            piece = await peer.reader.readexactly(min(left, 512 * 1024))
            digest.update(piece)
            left -= len(piece)
            await asyncio.sleep(0.04)
        await peer.send(ok(digest.hexdigest().encode()))

    async with raw_server(handler, receive_buffer=256 * 1024) as server:
        pool = make_pool(read_timeout_s=0.8)
        assert (
            await fetch(pool, server, "POST", memoryview(payload))
            == hashlib.sha256(payload).hexdigest().encode()
        )
        await pool.close()


async def test_max_idle_zero_keeps_no_connection() -> None:
    async def handler(peer: Peer) -> None:
        while True:
            await peer.read_request()
            await peer.send(ok(b"ok"))

    async with raw_server(handler) as server:
        pool = make_pool(max_idle_per_origin=0)
        for _ in range(2):
            assert await fetch(pool, server) == b"ok"
        assert server.accepted == 2
        await pool.close()


async def test_content_length_counts_bytes_of_a_wide_memoryview() -> None:
    payload = os.urandom(4096)
    seen: list[bytes] = []

    async def handler(peer: Peer) -> None:
        _, body = await peer.read_request()
        seen.append(body)
        await peer.send(ok(b"ok"))

    async with raw_server(handler) as server:
        pool = make_pool()
        assert await fetch(pool, server, "POST", memoryview(payload).cast("I")) == b"ok"
        assert seen == [payload]
        await pool.close()


@pytest.mark.parametrize("size", [100, SMALL_BODY - 22, SMALL_BODY + 1])
async def test_a_body_in_pieces_goes_out_as_their_concatenation_with_its_length(size: int) -> None:
    """Either side of the one-write threshold: the head's Content-Length is the pieces' total and
    the upstream reads exactly their bytes, twice over one connection (a retry resends them)."""
    body, expected = _pieces(os.urandom(size))
    seen: list[tuple[bytes, bytes]] = []

    async def handler(peer: Peer) -> None:
        for _ in range(2):
            seen.append(await peer.read_request())
            await peer.send(ok(b"ok"))

    async with raw_server(handler) as server:
        pool = make_pool()
        assert await fetch(pool, server, "POST", body) == b"ok"
        assert await fetch(pool, server, "POST", body) == b"ok"
        assert server.accepted == 1
        await pool.close()
    assert [b for _, b in seen] == [expected, expected]
    assert all(f"Content-Length: {len(expected)}\r\n".encode() in head for head, _ in seen)
