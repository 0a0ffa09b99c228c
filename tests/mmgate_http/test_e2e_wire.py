"""The gateway's HTTP layer as an attacker sees it: raw bytes in, and the exact bytes each side gets.

Every test speaks raw sockets to a real gateway on loopback. The upstream is a raw recorder too
(it answers with ``Connection: close``, so each upstream connection carries exactly one request
and its bytes are that request as the gateway framed it): a refused request must never reach
it, and what does reach it must be what the gateway framed itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httptools
import orjson
import pytest
import uvloop

from mmgate.config import load_config_text
from mmgate.gateway.app import Running, settings_of
from mmgate.http.client import UpstreamPool, UpstreamProtocolError
from mmgate.http.request import Request
from mmgate.http.responses import json_response
from mmgate.http.server import HttpServer, ServerLimits
from mmgate.http.writer import ResponseWriter
from support.upstreams import OrderRouter, start_gateway

BODY = b'{"model":"m","messages":[]}'
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
    b'Connection: close\r\n\r\n{"ok":true}'
)


class _Request:
    """httptools callbacks: when the first request on an upstream connection is complete."""

    def __init__(self) -> None:
        self.target = b""
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_message_complete(self) -> None:
        self.done = True


@dataclass
class RawUpstream:
    """A model server that records the raw bytes of every completion request it gets."""

    reply: bytes = OK
    requests: list[bytes] = field(default_factory=list)
    port: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen = _Request()
        parser = httptools.HttpRequestParser(seen)
        raw = b""
        with contextlib.suppress(ConnectionError, httptools.HttpParserError):
            while not seen.done and (data := await reader.read(65536)):
                raw += data
                parser.feed_data(data)
            if seen.target.startswith(b"/metrics"):
                text = b'vllm:num_requests_waiting{model_name="m"} 0\n'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(text), text))
            elif seen.target.startswith(b"/v1/models"):
                cards = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(cards), cards))
            elif seen.done or raw:
                self.requests.append(raw)
                writer.write(self.reply)
            await writer.drain()
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


@dataclass
class Wire:
    upstream: RawUpstream
    running: Running
    port: int


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    upstream = RawUpstream()
    await upstream.start()
    _, running, url = await start_gateway([f"127.0.0.1:{upstream.port}"], OrderRouter())
    port = int(url.rsplit(":", 1)[1])
    for _ in range(100):  # scraped and healthy before the first request
        if running.gateway.data.ready():
            break
        await asyncio.sleep(0.02)
    yield Wire(upstream, running, port)
    await running.stop()
    await upstream.stop()


def request(
    *headers: bytes,
    body: bytes = BODY,
    target: bytes = b"/v1/chat/completions",
    length: bool = True,
) -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: gw\r\n" % target
    if length:
        head += b"Content-Length: %d\r\n" % len(body)
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def chunked(*headers: bytes, body: bytes = b"1b\r\n" + BODY + b"\r\n0\r\n\r\n") -> bytes:
    """A chunked request; ``Transfer-Encoding: chunked`` unless ``headers`` name a coding."""
    if not any(h.lower().startswith(b"transfer-encoding") for h in headers):
        headers = (b"Transfer-Encoding: chunked", *headers)
    return request(*headers, body=body, length=False)


async def talk(port: int, data: bytes, *, wait: float = 2.0) -> tuple[bytes, bool]:
    """Send ``data``; read until the gateway closes or goes quiet. Returns (bytes, closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    got = b""
    closed = False
    try:
        while True:
            async with asyncio.timeout(wait if not got else 0.3):
                piece = await reader.read(65536)
            if not piece:
                closed = True
                break
            got += piece
    except TimeoutError:
        pass
    except ConnectionError:
        closed = True
    finally:
        writer.close()
    return got, closed


def first_status(data: bytes) -> int:
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def answers(data: bytes) -> int:
    """How many responses ``data`` holds (every answer of the gateway has a Content-Length)."""
    return data.lower().count(b"\r\ncontent-length: ")


def error_of(data: bytes) -> dict[str, object]:
    body = data[data.index(b"\r\n\r\n") + 4 :]
    end = body.index(b"}}") + 2  # the first response's OpenAI error document
    error: dict[str, object] = orjson.loads(body[:end])["error"]
    return error


# -- request smuggling and desync -------------------------------------------------------------

REFUSED = {
    "Transfer-Encoding and Content-Length": request(b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
    "Transfer-Encoding: chunked, identity": chunked(b"Transfer-Encoding: chunked, identity"),
    "Transfer-Encoding: identity": request(b"Transfer-Encoding: identity"),
    "Transfer-Encoding: gzip": chunked(b"Transfer-Encoding: gzip"),
    "Transfer-Encoding: xchunked": chunked(b"Transfer-Encoding: xchunked"),
    "Transfer-Encoding: gzip, chunked (a coding the gateway cannot undo)": chunked(
        b"Transfer-Encoding: gzip, chunked"
    ),
    "Transfer-Encoding twice": chunked(b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
    "Transfer-Encoding : chunked (space before colon)": chunked(b"Transfer-Encoding : chunked"),
    "two equal Content-Lengths": request(b"Content-Length: 27"),
    "Content-Length: 27, 27": request(b"Content-Length: 27, 27", length=False),
    "Content-Length: +27": request(b"Content-Length: +27", length=False),
    "Content-Length: -1": request(b"Content-Length: -1", length=False),
    "obs-fold continuation line": request(b"X-A: 1", b" folded"),
    "obs-fold hiding Transfer-Encoding": request(b"X-A: 1", b" Transfer-Encoding: chunked"),
    "bare LF line endings": request().replace(b"\r\n", b"\n"),
    "bare LF after one header": request(b"X-A: 1").replace(b"X-A: 1\r\n", b"X-A: 1\n"),
    "bare CR inside a header": request(b"X-A: a\rInjected: b"),
    "NUL in a header value": request(b"X-A: a\x00b"),
    "chunk size 0x1b": chunked(body=b"0x1b\r\n" + BODY + b"\r\n0\r\n\r\n"),
    "chunk size overflow": chunked(body=b"f" * 20 + b"\r\n" + BODY + b"\r\n0\r\n\r\n"),
    "chunk size with a space": chunked(body=b"1b \r\n" + BODY + b"\r\n0\r\n\r\n"),
    "chunk data longer than its size": chunked(body=b"1a\r\n" + BODY + b"\r\n0\r\n\r\n"),
    "chunk extension ended by bare LF": chunked(body=b"1b;a\n" + BODY + b"\r\n0\r\n\r\n"),
    "lower-case method": request().replace(b"POST", b"post", 1),
    "control byte in the target": request(target=b"/v1/chat/completions?a=\x01"),
    "h2c prior knowledge": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "no Host in HTTP/1.1": request().replace(b"Host: gw\r\n", b""),
    "two Hosts": request(b"host: evil.example"),
}


async def test_smuggling_and_desync_attempts_are_refused_and_never_reach_the_upstream(wire: Wire) -> None:
    for name, data in REFUSED.items():
        got, closed = await talk(wire.port, data)
        status = first_status(got)
        assert status == 400, (name, got[:200])
        assert error_of(got)["message"], name
        assert closed, name
    assert wire.upstream.requests == []


async def test_every_accepted_framing_reaches_the_upstream_as_exactly_the_body_sent(wire: Wire) -> None:
    """Chunk extensions, leading zeros and a body that looks like a second request: the upstream
    gets one request, Content-Length framed by the gateway, carrying exactly the client's body."""
    hidden = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 27\r\n\r\n" + BODY
    cases = [
        chunked(body=b"1b;ext=1;x\r\n" + BODY + b"\r\n0\r\n\r\n"),
        chunked(body=b"000001b\r\n" + BODY + b"\r\n0\r\n\r\n"),
        chunked(b"Transfer-Encoding:\tCHUNKED"),
        chunked(body=b"".join(b"1\r\n%c\r\n" % c for c in BODY) + b"0\r\n\r\n"),
        request(),
    ]
    for data in cases:
        got, _ = await talk(wire.port, data)
        assert first_status(got) == 200, got[:200]
    # The hidden request is JSON-invalid body text to the gateway: refused whole, never split.
    got, _ = await talk(wire.port, request(body=hidden))
    assert first_status(got) == 400 and answers(got) == 1
    assert len(wire.upstream.requests) == len(cases)
    for raw in wire.upstream.requests:
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        assert body == BODY
        assert b"content-length: 27" in lines and not any(b"transfer-encoding" in x for x in lines)


async def test_a_content_length_of_thousands_of_digits_is_a_400_naming_the_header(wire: Wire) -> None:
    """llhttp lets leading zeros through; 4,300 of them used to end in int()'s digit limit inside
    our callback and httptools' bare "User callback error"."""
    got, closed = await talk(wire.port, request(b"Content-Length: " + b"0" * 4300 + b"27", length=False))
    error = error_of(got)
    assert first_status(got) == 400 and closed
    assert error["param"] == "Content-Length" and "callback" not in str(error["message"])
    assert wire.upstream.requests == []


async def test_a_bug_in_a_parser_callback_is_logged_without_request_bytes_and_answered_500(
    h1: list[HttpServer], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(raw: list[tuple[str, str]], _single_valued: frozenset[str]) -> None:
        raise KeyError(raw[-1][1])  # a bug whose message quotes a header value

    monkeypatch.setattr("mmgate.http.server.Headers", broken)
    _, port = await listen(h1, health)
    with caplog.at_level(logging.ERROR, logger="mmgate.http"):
        got, closed = await talk(port, b"GET / HTTP/1.1\r\nHost: gw\r\nX-Secret: s3cr3t\r\n\r\n")
    assert first_status(got) == 500 and closed
    assert error_of(got)["code"] == "internal_error"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "KeyError" in logged and "on_headers_complete" in logged
    assert "s3cr3t" not in logged and "s3cr3t" not in caplog.text


# -- headers ------------------------------------------------------------------------------------


async def test_routing_headers_are_stripped_in_every_spelling_and_duplicate(wire: Wire) -> None:
    got, _ = await talk(
        wire.port,
        request(
            b"X-Gateway-Destination-Endpoint: 169.254.169.254:80",
            b"x-gateway-destination-endpoint: 10.0.0.9:1",
            b"X-PREFILLER-HOST-PORT: 10.0.0.9:2",
            b"x-Encoder-Hosts-Ports: 10.0.0.9:3",
            b"x-encoder-hosts-ports: 10.0.0.9:4",
            b"X-MmGate-Endpoint: 10.0.0.9:5",
            b"x-mmgate-anything: 10.0.0.9:6",
            b"X-Data-Parallel-Host-Port: 10.0.0.9:7",
        ),
    )
    assert first_status(got) == 200
    (raw,) = wire.upstream.requests
    assert b"10.0.0.9" not in raw and b"169.254" not in raw
    # The scheduler's own routing header is the only one, set once.
    assert raw.lower().count(b"x-prefiller-host-port:") == 1


async def test_a_repeated_header_the_gateway_reads_is_refused_naming_it(wire: Wire) -> None:
    """The gateway would act on the first copy while the model server may read the last: a
    single-valued header it reads must come once. Other headers repeat freely."""
    for first, second in [
        (b"Authorization: Bearer a", b"authorization: Bearer b"),
        (b"x-api-key: a", b"X-Api-Key: b"),
        (b"Content-Type: application/json", b"Content-Type: text/plain"),
        (b"X-Request-Id: one", b"x-request-id: two"),
        (b"x-llm-d-video-fps: 1", b"x-llm-d-video-fps: 30"),
    ]:
        got, closed = await talk(wire.port, request(first, second))
        name = first.split(b":")[0].decode().lower()
        assert first_status(got) == 400 and closed, (name, got[:200])
        assert error_of(got)["param"] == name and error_of(got)["code"] == "duplicate_header"
    assert wire.upstream.requests == []
    got, _ = await talk(wire.port, request(b"X-Tag: a", b"X-Tag: b"))
    assert first_status(got) == 200
    assert b"X-Tag: a\r\n" in wire.upstream.requests[0] and b"X-Tag: b\r\n" in wire.upstream.requests[0]


async def test_headers_named_in_connection_are_not_forwarded(wire: Wire) -> None:
    """RFC 9110 §7.6.1: a header the client lists in Connection is hop-by-hop too."""
    got, _ = await talk(
        wire.port,
        request(
            b"Connection: keep-alive, X-Hop-One", b"X-Hop-One: 1", b"connection: x-hop-two", b"X-Hop-Two: 2"
        ),
    )
    assert first_status(got) == 200
    (raw,) = wire.upstream.requests
    assert b"x-hop" not in raw.lower() and b"connection" not in raw.lower()
    assert b"x-request-id: " in raw.lower()  # the gateway's own headers are never dropped this way


async def test_request_trailers_are_not_forwarded_as_headers(wire: Wire) -> None:
    """Trailers arrive after the routing decision: merged into the head they would reach the
    upstream unseen by the gateway's own checks."""
    body = b"1b\r\n" + BODY + b"\r\n0\r\nX-Late: trailer\r\nAuthorization: Bearer late\r\n\r\n"
    got, _ = await talk(wire.port, chunked(body=body))
    assert first_status(got) == 200
    (raw,) = wire.upstream.requests
    assert b"x-late" not in raw.lower() and b"authorization" not in raw.lower()


async def test_an_absolute_form_target_is_forwarded_in_origin_form(wire: Wire) -> None:
    """``POST http://evil/...`` must not reach the upstream (a proxy-aware sidecar would follow it)."""
    got, _ = await talk(wire.port, request(target=b"http://evil.example:8080/v1/chat/completions?x=1"))
    assert first_status(got) == 200
    (raw,) = wire.upstream.requests
    assert raw.startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\n")
    assert b"evil" not in raw


async def test_connect_options_star_and_long_urls_never_reach_the_upstream(wire: Wire) -> None:
    got, closed = await talk(
        wire.port, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n"
    )
    assert first_status(got) == 400 and answers(got) == 1 and closed
    # An upgrade would hand the body to "the new protocol": refused once, not served empty.
    got, closed = await talk(wire.port, request(b"Connection: Upgrade", b"Upgrade: h2c"))
    assert first_status(got) == 400 and answers(got) == 1 and closed
    assert error_of(got)["param"] == "Upgrade"
    # Without a body (curl --http2 on http://) the upgrade is ignored (RFC 9110 §7.8): HTTP/1.1.
    h2c = b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    got, _ = await talk(wire.port, h2c + b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
    assert first_status(got) == 200
    got, _ = await talk(wire.port, b"OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert first_status(got) == 404
    # A target over the head limit with no header after it (nothing else would count it).
    long_target = b"/v1/chat/completions?q=" + b"a" * (70 * 1024)
    got, closed = await talk(wire.port, b"POST %s HTTP/1.1\r\n\r\n" % long_target)  # no Host either
    assert first_status(got) == 414 and closed
    assert error_of(got)["code"] == "uri_too_long"
    assert wire.upstream.requests == []


async def test_non_ascii_header_bytes_cross_the_gateway_unchanged(wire: Wire) -> None:
    wire.upstream.reply = OK.replace(b"\r\n\r\n", b"\r\nX-Back: caf\xe9 \xc3\xa9\r\n\r\n")
    got, _ = await talk(wire.port, request(b"X-Name: caf\xc3\xa9 \xff"))
    assert first_status(got) == 200
    assert b"\r\nX-Name: caf\xc3\xa9 \xff\r\n" in wire.upstream.requests[0]
    assert (
        b"\r\nX-Back: caf\xe9 \xc3\xa9\r\n" in got
    )  # was re-encoded as UTF-8 (caf\xc3\xa9 \xc3\x83\xc2\xa9)


async def test_response_headers_named_in_connection_and_upstream_trailers_stay_behind(wire: Wire) -> None:
    wire.upstream.reply = (
        b"HTTP/1.1 200 OK\r\nConnection: close, X-Internal\r\nX-Internal: secret\r\n"
        b"Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nX-Kept: yes\r\n\r\n"
        b"5\r\nhello\r\n0\r\nSet-Cookie: late=1\r\n\r\n"
    )
    got, _ = await talk(wire.port, request())
    head, _, rest = got.partition(b"\r\n\r\n")
    lower = head.lower()
    assert first_status(got) == 200 and b"x-kept: yes" in lower
    assert b"x-internal" not in lower and b"keep-alive" not in lower and b"set-cookie" not in lower
    assert lower.count(b"transfer-encoding") == 1  # our own framing, not the upstream's
    assert rest == b"5\r\nhello\r\n0\r\n\r\n"


# -- resource exhaustion (the HTTP server alone) ------------------------------------------------


@pytest.fixture
async def h1() -> AsyncIterator[list[HttpServer]]:
    servers: list[HttpServer] = []
    yield servers
    for server in servers:
        await server.close(0.5)


async def listen(servers: list[HttpServer], handler: object, **limits: float) -> tuple[HttpServer, int]:
    server = HttpServer(handler, ServerLimits(**limits))  # type: ignore[arg-type]
    port = await server.listen("127.0.0.1", 0)
    servers.append(server)
    return server, port


async def health(_request: Request, writer: ResponseWriter) -> None:
    writer.send(json_response({"status": "ok", "pad": "x" * 2000}))


async def test_a_pipelining_client_that_never_reads_gets_bounded_buffers(h1: list[HttpServer]) -> None:
    """Thousands of tiny requests in one write and no reading: the gateway must neither answer
    into an ever-growing send buffer nor queue every request it parsed."""
    server, port = await listen(h1, health)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    flood = b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n" * 8000  # 264 KB: one read's worth
    peak_buffer = peak_queue = 0

    async def sample() -> None:
        nonlocal peak_buffer, peak_queue
        while True:
            for conn in server.connections:
                if conn.transport is not None:
                    peak_buffer = max(peak_buffer, conn.transport.get_write_buffer_size())
                peak_queue = max(peak_queue, conn.queued)
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    try:
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(1.5):
                while True:
                    await loop.sock_sendall(sock, flood)
    finally:
        sampler.cancel()
        sock.close()
    limits = server.limits
    assert peak_queue <= 4 * limits.max_pipelined + 1, peak_queue
    assert peak_buffer < 1 << 20, peak_buffer  # answers wait for the client instead of piling up


async def unread_stream_is_cut(servers: list[HttpServer], limits: ServerLimits) -> None:
    """A client asks for a stream and never reads it: the handler must unwind within 5 s."""
    ended = asyncio.Event()

    async def endless(_request: Request, writer: ResponseWriter) -> None:
        writer.start(200, [("content-type", "text/event-stream")])
        try:
            while True:
                await writer.write(b"data: " + b"x" * 65536 + b"\n\n")
        finally:
            ended.set()

    server = HttpServer(endless, limits)
    port = await server.listen("127.0.0.1", 0)
    servers.append(server)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: gw\r\n\r\n")
        await asyncio.wait_for(ended.wait(), 5)  # never read: cut, and the handler unwound
    finally:
        sock.close()


async def test_a_client_that_stops_reading_a_stream_is_cut_after_the_send_timeout(
    h1: list[HttpServer],
) -> None:
    """A stream nobody reads must not hold its upstream request (and admission slot) forever."""
    await unread_stream_is_cut(h1, ServerLimits(send_timeout_s=0.4))


async def test_the_send_timeout_is_the_config_key_send_timeout_s(h1: list[HttpServer]) -> None:
    """``mmgate.sendTimeoutS`` reaches the server (the default, 60 s, would fail this test)."""
    config = load_config_text(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nmmgate:\n  sendTimeoutS: 0.4\n"
    )
    await unread_stream_is_cut(h1, settings_of(config.mmgate).server_limits())


async def test_a_body_of_tiny_chunks_costs_memory_in_proportion_to_its_bytes(h1: list[HttpServer]) -> None:
    """256 KiB sent as 1-byte chunks: kept as one buffer, not a quarter of a million objects."""
    sizes: list[int] = []

    async def count(request: Request, writer: ResponseWriter) -> None:
        sizes.append(len(request.body))
        writer.send(json_response({"size": len(request.body)}))

    _, port = await listen(h1, count, max_body_bytes=1 << 20)
    size = 256 * 1024
    data = (
        b"POST /c HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"1\r\nx\r\n" * size
        + b"0\r\n\r\n"
    )
    tracemalloc.start()
    try:
        got, _ = await talk(port, data, wait=20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first_status(got) == 200 and sizes == [size]
    assert peak < 4 * size + (1 << 20), peak  # was ~45 bytes per body byte


async def test_chunk_extensions_and_size_lines_count_toward_the_body_limit(h1: list[HttpServer]) -> None:
    """A chunked body's framing is bounded with its data: one endless extension is cut with a 413,
    an ordinary body in small chunks with extensions is served."""
    sizes: list[int] = []

    async def count(request: Request, writer: ResponseWriter) -> None:
        sizes.append(len(request.body))
        await health(request, writer)

    _, port = await listen(h1, count, max_body_bytes=64 * 1024)
    fine = b"".join(b"400;chunk=%d\r\n%b\r\n" % (k, b"x" * 1024) for k in range(60)) + b"0\r\n\r\n"
    got, _ = await talk(port, request(b"Transfer-Encoding: chunked", body=fine, target=b"/", length=False))
    assert first_status(got) == 200 and sizes == [60 * 1024]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n1;x=")
    with contextlib.suppress(ConnectionError):
        for _ in range(64):  # 4 MiB of one extension, never a body byte
            writer.write(b"a" * 65536)
            await writer.drain()
    try:
        got = await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()
    assert first_status(got) == 413 and error_of(got)["code"] == "body_too_large"
    assert sizes == [60 * 1024]


async def test_idle_connections_are_closed_at_the_header_and_keepalive_timeouts(h1: list[HttpServer]) -> None:
    server, port = await listen(h1, health, header_timeout_s=0.3, keepalive_timeout_s=0.3)
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(100)]
    served, served_writer = await asyncio.open_connection("127.0.0.1", port)
    served_writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
    try:
        async with asyncio.timeout(3):
            for reader, _ in silent:
                assert await reader.read() == b""  # closed without a word: nothing was asked
            answer = await served.read()  # answered, then closed once idle for the keep-alive timeout
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"}")
        assert not server.connections
    finally:
        for _, writer in silent:
            writer.close()
        served_writer.close()


async def test_expect_100_continue_never_splits_another_response(h1: list[HttpServer]) -> None:
    """An interim 100 for a pipelined request would land inside the answer ahead of it."""

    async def slow(request: Request, writer: ResponseWriter) -> None:
        await asyncio.sleep(0.2 if request.path == "/slow" else 0)
        writer.send(json_response({"path": request.path, "size": len(request.body)}))

    _, port = await listen(h1, slow)
    first = b"POST /slow HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\nx"
    second = b"POST /next HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nyy"
    got, _ = await talk(port, first + second)
    assert b"100 Continue" not in got and got.count(b"HTTP/1.1 200 OK") == 2
    assert got.index(b'"/slow"') < got.index(b'"/next"')


async def test_an_upstream_head_without_end_is_cut_off_not_buffered() -> None:
    """A sick (or hostile) pod that streams header lines forever: the pool drops it as a protocol
    error at once instead of keeping every line until the read timeout (aiohttp capped lines too)."""

    async def endless_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        with contextlib.suppress(ConnectionError):
            for _ in range(4000):  # 4 MB of headers, never a blank line
                writer.write(b"X-Pad: " + b"p" * 1024 + b"\r\n")
                await writer.drain()
            await asyncio.sleep(10)
        writer.close()

    server = await asyncio.start_server(endless_head, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(connect_timeout_s=1.0, read_timeout_s=60.0)
    try:
        # a protocol error, not the read timeout (that would be a TimeoutError)
        with pytest.raises(UpstreamProtocolError, match="response head over"):
            await pool.request("127.0.0.1", port, "POST", "/v1/chat/completions", [], BODY)
    finally:
        await pool.close()
        server.close()


@pytest.mark.parametrize(
    "scenario",
    [
        test_a_pipelining_client_that_never_reads_gets_bounded_buffers,
        test_a_client_that_stops_reading_a_stream_is_cut_after_the_send_timeout,
    ],
)
def test_flow_control_holds_on_uvloop(scenario: Callable[[list[HttpServer]], Awaitable[None]]) -> None:
    """The same bounds on uvloop, the loop the gateway serves on (its transports pause and buffer
    on their own terms)."""

    async def main() -> None:
        servers: list[HttpServer] = []
        try:
            await scenario(servers)
        finally:
            for server in servers:
                await server.close(0.5)

    uvloop.run(main())
