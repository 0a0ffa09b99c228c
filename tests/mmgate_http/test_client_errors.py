"""The upstream HTTP/1.1 pool when things go wrong: stale keep-alive, resets, silences, refusals."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from mmgate.http.client import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamResetError,
)
from support.h1 import Peer, fetch, make_pool, ok, raw_server, read_all


async def test_stale_keep_alive_connection_is_retried_once_on_a_fresh_one() -> None:
    second_request_seen: list[bytes] = []

    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.read_request()
            await peer.send(ok(b"first"))
            # The server gives up on the keep-alive connection just as the next request arrives.
            _, body = await peer.read_request()
            second_request_seen.append(body)
            await peer.close()
        else:
            _, body = await peer.read_request()
            await peer.send(ok(b"fresh:" + body))

    async with raw_server(handler) as server:
        pool = make_pool()
        assert await fetch(pool, server, "POST", b"a") == b"first"
        assert await fetch(pool, server, "POST", b"b") == b"fresh:b"
        assert second_request_seen == [b"b"]
        assert server.accepted == 2
        await pool.close()


async def test_idle_connection_closed_by_the_server_is_not_handed_out() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(b"ok"))
        await peer.close()  # keep-alive by the headers, yet closed right after

    async with raw_server(handler) as server:
        pool = make_pool()
        for _ in range(2):
            assert await fetch(pool, server) == b"ok"
            await asyncio.sleep(0.05)
        assert server.accepted == 2
        await pool.close()


async def test_no_retry_after_part_of_the_response_arrived() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(ok(b"first"))
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Le")
        await peer.close()

    async with raw_server(handler) as server:
        pool = make_pool()
        assert await fetch(pool, server, "POST", b"a") == b"first"
        with pytest.raises(UpstreamResetError, match=f"127.0.0.1:{server.port}"):
            await pool.request("127.0.0.1", server.port, "POST", "/", [], b"b")
        assert server.accepted == 1
        await pool.close()


async def test_fresh_connection_closed_before_responding_is_not_retried() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.close()

    async with raw_server(handler) as server:
        pool = make_pool()
        with pytest.raises(UpstreamResetError, match="before responding"):
            await pool.request("127.0.0.1", server.port, "POST", "/", [], b"a")
        assert server.accepted == 1
        await pool.close()


async def test_connect_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = make_pool()
    with pytest.raises(UpstreamConnectError, match=f"127.0.0.1:{port}") as caught:
        await pool.request("127.0.0.1", port, "GET", "/", [], b"")
    assert isinstance(caught.value, OSError)
    await pool.close()


async def test_silent_server_times_out_within_the_read_timeout() -> None:
    never = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await never.wait()  # silent until the test ends: only the read timeout can end the wait

    async with raw_server(handler) as server:
        pool = make_pool(read_timeout_s=0.2)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=f"127.0.0.1:{server.port}"):
            await pool.request("127.0.0.1", server.port, "POST", "/", [], b"{}")
        assert time.monotonic() - started >= 0.15  # not before it (less the clock's resolution)
        never.set()
        await pool.close()


async def test_silence_in_the_middle_of_the_body_times_out() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await asyncio.sleep(30)

    async with raw_server(handler) as server:
        pool = make_pool(read_timeout_s=0.2)
        response = await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        assert await response.read() == b"abc"
        with pytest.raises(TimeoutError):
            await response.read()
        response.close()
        await pool.close()


async def test_reset_mid_body() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        await asyncio.sleep(0.05)
        peer.reset()

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        assert await response.read() == b"0123456789"
        with pytest.raises(UpstreamResetError, match="mid-body"):
            await response.read()
        response.release()
        await pool.close()


async def test_eof_mid_chunked_body_is_a_reset() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await peer.close()

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        with pytest.raises(UpstreamResetError):
            await read_all(response)
        await pool.close()


async def test_malformed_response_is_a_protocol_error() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"SMTP ready\r\n\r\n")
        await peer.at_eof()

    async with raw_server(handler) as server:
        pool = make_pool()
        with pytest.raises(UpstreamProtocolError, match="malformed"):
            await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        await pool.close()


@pytest.mark.parametrize("leave", ["close", "drop"])
async def test_a_response_closed_or_dropped_unread_drops_the_upstream_connection(leave: str) -> None:
    saw_eof: list[bool] = []

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        saw_eof.append(await peer.at_eof(timeout=2))

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "POST", "/", [], b"{}")
        assert await response.read() == b"hello"
        if leave == "close":
            response.close()
        else:
            del response  # neither released nor closed
        for _ in range(100):
            if saw_eof:
                break
            await asyncio.sleep(0.01)
        assert saw_eof == [True]
        await pool.close()


@pytest.mark.parametrize("framing", [b"Content-Length: 100\r\n", b""], ids=["length", "until-close"])
async def test_pool_close_breaks_in_flight_reads(framing: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\nabc")
        await peer.at_eof()

    async with raw_server(handler) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        assert await response.read() == b"abc"
        await pool.close()
        with pytest.raises(UpstreamResetError):
            await response.read()
        with pytest.raises(RuntimeError, match="closed"):
            await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")


@pytest.mark.parametrize(
    ("target", "headers"),
    [("/x HTTP/1.1\r\nEvil: 1", []), ("/", [("X-A", "v\r\nEvil: 1")]), ("/", [("X-A\nEvil", "1")])],
)
async def test_header_injection_is_refused(target: str, headers: list[tuple[str, str]]) -> None:
    pool = make_pool()
    with pytest.raises(ValueError, match="CR or LF"):
        await pool.request("127.0.0.1", 9, "GET", target, headers, b"")
    await pool.close()


def test_errors_are_os_errors() -> None:
    assert issubclass(UpstreamConnectError, UpstreamError)
    assert issubclass(UpstreamResetError, UpstreamError)
    assert issubclass(UpstreamError, OSError)


async def test_non_latin1_header_is_refused_without_quoting_it() -> None:
    pool = make_pool()
    with pytest.raises(ValueError, match="not latin-1") as caught:
        await pool.request("127.0.0.1", 9, "GET", "/", [("Authorization", "Bearer s\u2603cret")], b"")
    assert "\u2603" not in str(caught.value)
    await pool.close()


async def test_switching_protocols_is_a_protocol_error() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        )
        await peer.at_eof()

    async with raw_server(handler) as server:
        pool = make_pool()
        with pytest.raises(UpstreamProtocolError):
            await pool.request("127.0.0.1", server.port, "GET", "/", [], b"")
        await pool.close()


async def test_early_answer_before_the_body_was_sent_is_not_reused() -> None:
    payload = os.urandom(16 * 1024 * 1024)

    async def handler(peer: Peer) -> None:
        if peer.index > 0:
            await peer.read_request()
            await peer.send(ok(b"fresh"))
            return
        await peer.reader.readuntil(b"\r\n\r\n")
        # Answers at once without reading the body (as a 413 would), then reads it slowly.
        await peer.send(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
        while await peer.reader.read(64 * 1024):
            await asyncio.sleep(0.01)

    async with raw_server(handler, receive_buffer=64 * 1024) as server:
        pool = make_pool()
        response = await pool.request("127.0.0.1", server.port, "POST", "/", [], payload)
        assert response.status == 413
        assert await response.read() == b""
        response.release()
        assert await fetch(pool, server) == b"fresh"  # not queued behind the body's tail
        assert server.accepted == 2
        await pool.close()
