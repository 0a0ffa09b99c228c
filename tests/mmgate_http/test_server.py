"""The HTTP/1.1 server on raw sockets: framing, pipelining, limits, timeouts, disconnects and
back-pressure, as a client on the wire sees them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httptools
import orjson
import pytest

from mmgate.http.request import Request
from mmgate.http.responses import json_response
from mmgate.http.server import HttpServer, ServerLimits
from mmgate.http.writer import ResponseWriter

Handler = Callable[[Request, ResponseWriter], Awaitable[None]]
Serve = Callable[..., Awaitable[tuple[HttpServer, int]]]


@dataclass
class Reply:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False


class _Replies:
    """httptools callbacks collecting every response on a connection."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.replies.append(Reply())

    def on_header(self, name: bytes, value: bytes) -> None:
        self.replies[-1].headers[name.decode().lower()] = value.decode()

    def on_headers_complete(self) -> None:
        self.replies[-1].status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.replies[-1].body += body

    def on_message_complete(self) -> None:
        self.replies[-1].complete = True


async def exchange(
    port: int, data: bytes, *, expect: int = 1, timeout: float = 5.0
) -> tuple[list[Reply], bool]:
    """Send ``data``, read until ``expect`` whole responses arrived (or EOF). Returns the
    responses (1xx interim ones left out) and whether the server closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = _Replies()
    closed = False
    try:
        writer.write(data)
        async with asyncio.timeout(timeout):
            while sum(r.complete and r.status >= 200 for r in got.replies) < expect:
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    with contextlib.suppress(httptools.HttpParserError):
                        got.parser.feed_data(b"")
                    break
                got.parser.feed_data(chunk)
            if not closed:
                with contextlib.suppress(TimeoutError, ConnectionError):
                    async with asyncio.timeout(0.2):
                        closed = await reader.read(1) == b""
    finally:
        writer.close()
    return [r for r in got.replies if r.status >= 200], closed


async def echo(request: Request, writer: ResponseWriter) -> None:
    """Says what arrived: method, target, body size and digest, a header."""
    if request.path == "/slow":
        await asyncio.sleep(0.2)
    writer.send(
        json_response(
            {
                "method": request.method,
                "target": request.target,
                "size": len(request.body),
                "sha": hashlib.sha256(request.body).hexdigest(),
                "tag": request.headers.get("X-Tag"),
            }
        )
    )


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[HttpServer] = []

    async def start(handler: Handler = echo, **limits: float) -> tuple[HttpServer, int]:
        server = HttpServer(handler, ServerLimits(**limits))  # type: ignore[arg-type]
        port = await server.listen("127.0.0.1", 0)
        servers.append(server)
        return server, port

    yield start
    for server in servers:
        await server.close(1.0)


def post(target: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {target} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_pipelined_requests_are_answered_in_order_on_one_connection(serve: Serve) -> None:
    _, port = await serve()
    # The first is the slowest: its answer must still come first.
    data = post("/slow", b"a") + post("/fast?x=1", b"bb") + post("/fast", b"ccc", "Connection: close")
    replies, closed = await exchange(port, data, expect=3)
    docs = [orjson.loads(r.body) for r in replies]
    assert [(d["target"], d["size"]) for d in docs] == [("/slow", 1), ("/fast?x=1", 2), ("/fast", 3)]
    assert closed  # the last asked for Connection: close


async def test_a_chunked_request_body_arrives_whole_and_its_size_is_limited(serve: Serve) -> None:
    _, port = await serve(max_body_bytes=1000)
    pieces = [b"x" * 300, b"y" * 7, b"z" * 200]
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    head = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    replies, closed = await exchange(port, head + chunked)
    assert orjson.loads(replies[0].body)["sha"] == hashlib.sha256(b"".join(pieces)).hexdigest()
    assert not closed  # keep-alive
    too_big = b"".join(b"%x\r\n%b\r\n" % (400, b"q" * 400) for _ in range(3)) + b"0\r\n\r\n"
    replies, closed = await exchange(port, head + too_big)
    error = orjson.loads(replies[0].body)["error"]
    assert replies[0].status == 413 and error["param"] == "body" and error["code"] == "body_too_large"
    assert closed


async def test_an_interim_103_goes_out_before_the_head_to_http11_clients_only(serve: Serve) -> None:
    """``writer.interim``: on the wire at once, ahead of the final head; not to an HTTP/1.0
    client (RFC 9110 §15.2) and not after the head has started."""
    sent: list[bool] = []

    async def handler(request: Request, writer: ResponseWriter) -> None:
        sent.append(writer.interim(103, [("x-mmgate-stage-done", "10.0.0.7:8000")]))
        writer.start(200, [], content_length=4)
        sent.append(writer.interim(103, [("x-late", "1")]))
        writer.end(b"done")

    _, port = await serve(handler)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(post("/a", b""))
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert first == b"HTTP/1.1 103 Early Hints\r\nx-mmgate-stage-done: 10.0.0.7:8000\r\n\r\n"
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200") and b"x-late" not in head
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"done"
    finally:
        writer.close()
    replies, _ = await exchange(port, b"POST /b HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
    assert replies[0].status == 200 and sent == [True, False, False, False]


async def test_expect_100_continue(serve: Serve) -> None:
    _, port = await serve(max_body_bytes=100)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"  # sent before the body
        writer.write(b"hello")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    # Over the limit: refused from the head alone, no 100 Continue, nothing more is read.
    replies, closed = await exchange(
        port, b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\nExpect: 100-continue\r\n\r\n"
    )
    assert replies[0].status == 413 and closed
    replies, closed = await exchange(port, post("/e", b"12", "Expect: teapot"))
    assert replies[0].status == 417 and orjson.loads(replies[0].body)["error"]["param"] == "Expect"


async def test_a_trickled_head_gets_408_and_the_connection_is_closed(serve: Serve) -> None:
    """The timeout bounds the whole head, not the gap between bytes: a client that sends a header
    line every 0.1 s, forever, is still cut off."""
    _, port = await serve(header_timeout_s=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = asyncio.get_running_loop().time()
    writer.write(b"POST /a HTTP/1.1\r\nHost: x\r\n")
    answer = asyncio.create_task(reader.read())  # to EOF: the server closes
    try:
        for k in range(1200):  # two minutes of trickle, far beyond any per-gap timeout
            if answer.done():
                break
            with contextlib.suppress(ConnectionError):
                writer.write(b"X-Slow-%d: 1\r\n" % k)
            await asyncio.sleep(0.1)
        data = await answer
    finally:
        writer.close()
    assert data.startswith(b"HTTP/1.1 408")
    assert b'"code":"header_timeout"' in data
    assert asyncio.get_running_loop().time() - started >= 0.25


async def test_a_head_over_the_limit_gets_431(serve: Serve) -> None:
    _, port = await serve(max_header_bytes=2048)
    replies, closed = await exchange(port, post("/a", b"{}", "X-Big: " + "b" * 4000))
    assert replies[0].status == 431 and closed
    assert orjson.loads(replies[0].body)["error"]["code"] == "headers_too_large"
    # Many small headers count together.
    many = [f"X-H{i}: {'v' * 50}" for i in range(60)]
    replies, closed = await exchange(port, post("/a", b"{}", *many))
    assert replies[0].status == 431 and closed
    replies, _ = await exchange(port, post("/a", b"{}", "X-Fine: 1"))
    assert replies[0].status == 200


async def test_malformed_requests_get_400_and_the_connection_is_closed(serve: Serve) -> None:
    _, port = await serve()
    for garbage in (
        b"NONSENSE\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"POST /a HTTP/1.1\r\nBad Header\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ):
        replies, closed = await exchange(port, garbage)
        assert replies and replies[0].status == 400, garbage
        assert "malformed HTTP request" in orjson.loads(replies[0].body)["error"]["message"]
        assert closed, garbage
    # A good request ahead of a bad one on the same connection is still answered, in order.
    replies, closed = await exchange(port, post("/ok", b"1") + b"GARBAGE\r\n\r\n", expect=2)
    assert [r.status for r in replies] == [200, 400] and closed


async def streamer(request: Request, writer: ResponseWriter) -> None:
    """Three pieces, framed by what is known: a length for /length, nothing otherwise."""
    pieces = [b"one ", b"two ", b"three"]
    length = sum(map(len, pieces)) if request.path == "/length" else None
    writer.start(200, [("content-type", "text/plain")], content_length=length)
    for piece in pieces:
        await writer.write(piece)
        await asyncio.sleep(0.01)
    writer.end()


async def test_response_framing_follows_what_is_known_and_the_http_version(serve: Serve) -> None:
    _, port = await serve(streamer)
    replies, closed = await exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert replies[0].headers["transfer-encoding"] == "chunked" and replies[0].body == b"one two three"
    assert not closed
    replies, closed = await exchange(port, b"GET /length HTTP/1.1\r\nHost: x\r\n\r\n")
    assert replies[0].headers["content-length"] == "13" and "transfer-encoding" not in replies[0].headers
    assert not closed
    # HTTP/1.0 has no chunked framing: the body ends when the connection does.
    replies, closed = await exchange(port, b"GET /stream HTTP/1.0\r\n\r\n")
    assert replies[0].body == b"one two three" and closed
    assert "transfer-encoding" not in replies[0].headers and "content-length" not in replies[0].headers


async def test_a_client_that_disconnects_mid_stream_cancels_the_handler(serve: Serve) -> None:
    cancelled = asyncio.Event()

    async def endless(_request: Request, writer: ResponseWriter) -> None:
        writer.start(200, [("content-type", "text/event-stream")])
        try:
            while True:
                await writer.write(b"data: tick\n\n")
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    server, port = await serve(endless)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"data: tick" in await asyncio.wait_for(reader.readuntil(b"data: tick"), 2)
    writer.close()
    await asyncio.wait_for(cancelled.wait(), 2)
    for _ in range(100):
        if not server.connections:
            break
        await asyncio.sleep(0.01)
    assert not server.connections


async def test_a_client_that_does_not_read_pauses_the_writer_instead_of_growing_its_buffer(
    serve: Serve,
) -> None:
    written = 0
    buffered: list[int] = []
    chunk = b"z" * 65536

    async def firehose(_request: Request, writer: ResponseWriter) -> None:
        nonlocal written
        writer.start(200, [("content-type", "application/octet-stream")])
        while written < 256 * 1024 * 1024:
            await writer.write(chunk)
            written += len(chunk)
            buffered.append(writer.buffered_bytes)
        writer.end()

    _, port = await serve(firehose)
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
    writer.transport.pause_reading()  # type: ignore[attr-defined]  # a client that never reads
    writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0.5)
    stalled_at = written
    await asyncio.sleep(0.3)
    writer.close()
    # The kernel's socket buffers take a few MB; past that the handler waits on the client.
    assert stalled_at < 64 * 1024 * 1024
    assert written == stalled_at  # it made no progress while the client did not read
    assert max(buffered) <= 256 * 1024  # the gateway's own buffer stayed near the high-water mark


async def test_close_drains_an_in_flight_response_then_refuses_new_connections(serve: Serve) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def held(_request: Request, writer: ResponseWriter) -> None:
        writer.start(200, [("content-type", "text/plain")])
        await writer.write(b"one ")
        started.set()
        await release.wait()
        await writer.write(b"two three")
        writer.end()

    server, port = await serve(held)
    pending = asyncio.create_task(exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", timeout=60.0))
    await started.wait()
    closing = asyncio.create_task(server.close(60.0))
    await asyncio.sleep(0)  # close() stops listening before it waits for the drain
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    assert not closing.done()  # still waiting for the response in flight
    release.set()
    replies, closed = await pending
    await closing
    assert replies[0].body == b"one two three" and replies[0].complete and closed


async def test_a_handler_that_fails_gets_an_openai_shaped_500_and_the_connection_closes(serve: Serve) -> None:
    async def broken(_request: Request, _writer: ResponseWriter) -> None:
        raise RuntimeError("bug")

    _, port = await serve(broken)
    replies, closed = await exchange(port, post("/x", b"{}"))
    error = orjson.loads(replies[0].body)["error"]
    assert replies[0].status == 500 and error["code"] == "internal_error" and "bug" not in error["message"]
    assert closed


@dataclass
class Upload:
    sent_at_answer: int | None = None  # body bytes sent when the answer was first readable
    sent: int = 0  # body bytes the kernel accepted before sending stopped
    answer: bytes = b""
    ended_by: str = ""


def chunked_upload(port: int, total: int, piece: int = 256 * 1024) -> Upload:
    """Stream a ``total``-byte chunked body over a blocking socket (run in a thread), watching
    for an early answer after every piece, and keep sending after it until the server stops
    taking bytes: what a client that does not stop on its own would do."""
    import select
    import socket

    out = Upload()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    sock.settimeout(3.0)
    chunk = b"%x\r\n%b\r\n" % (piece, b"x" * piece)
    try:
        sock.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        while out.sent < total:
            if out.sent_at_answer is None and select.select([sock], [], [], 0)[0]:
                out.sent_at_answer = out.sent
                out.answer = sock.recv(65536)
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError) as exc:
                out.ended_by = type(exc).__name__
                break
            except TimeoutError:
                out.ended_by = "stalled"
                break
            out.sent += piece
        else:
            out.ended_by = "everything sent"
        if out.sent_at_answer is None:
            with contextlib.suppress(OSError):
                out.answer = sock.recv(65536)
    finally:
        sock.close()
    return out


async def test_a_chunked_upload_over_the_limit_is_refused_at_the_limit_and_reading_stops(
    serve: Serve,
) -> None:
    """100 MiB chunked against a 64 MiB limit: the 413 is readable once about the limit has been
    sent (the slack is the sockets' buffers), and the server reads no more after it."""
    limit, total = 64 << 20, 100 << 20
    _, port = await serve(max_body_bytes=limit, linger_s=0.5)
    up = await asyncio.to_thread(chunked_upload, port, total)
    print(f"answer after {up.sent_at_answer} body bytes; {up.sent} sent in all; ended by {up.ended_by}")
    assert up.answer.startswith(b"HTTP/1.1 413 ")
    assert b'"code":"body_too_large"' in up.answer and b"connection: close" in up.answer
    assert up.sent_at_answer is not None and up.sent_at_answer <= limit + (8 << 20)
    assert up.ended_by in ("BrokenPipeError", "ConnectionResetError", "stalled")
    assert up.sent <= limit + (16 << 20)


async def test_the_application_names_the_headers_it_reads_once(serve: Serve) -> None:
    """The HTTP layer refuses repeats of the headers any relay reads (Host, Authorization, ...);
    a header only the application reads repeats freely unless its limits name it."""
    twice = post("/", b"", "X-Tag: a", "x-tag: b")
    replies, _ = await exchange(port=(await serve())[1], data=twice)
    assert replies[0].status == 200 and orjson.loads(replies[0].body)["tag"] == "a"
    _, port = await serve(single_valued_headers=frozenset({"x-tag"}))
    replies, closed = await exchange(port, twice)
    error = orjson.loads(replies[0].body)["error"]
    assert replies[0].status == 400 and closed
    assert error["param"] == "x-tag" and error["code"] == "duplicate_header"
    replies, _ = await exchange(port, post("/", b"", "Authorization: a", "authorization: b"))
    assert replies[0].status == 400 and orjson.loads(replies[0].body)["error"]["param"] == "authorization"
