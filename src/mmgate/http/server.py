"""The gateway's HTTP/1.1 server: one asyncio Protocol per client connection, parsed by httptools.

Per connection: requests are parsed as bytes arrive (keep-alive, pipelining, chunked bodies),
each complete request becomes a :class:`~mmgate.http.request.Request` with its whole body,
and requests are answered strictly in order, one handler task at a time. What the handler does
not see is refused here, in the OpenAI error shape, and the connection closed: a malformed
request (400), a head larger than ``max_header_bytes`` (431), a head or body that does not
arrive in time (408), a body over ``max_body_bytes`` (413, from the declared length before the
body is sent when possible), a target longer than the head limit (414), a transfer coding other
than ``chunked`` (400), more pipelined requests than the connection queues (429) and an
``Expect`` other than ``100-continue`` (417). Trailers of a chunked body are read and dropped: they
arrive after the request was judged, so they never join its headers. An absolute-form target
(``POST http://host/path``) is reduced to origin form: only the path and query travel on.

A client that disconnects while its request is being handled cancels the handler task, so the
proxy closes its upstream connection and the model server aborts the request instead of
finishing it for nobody. Writes honour the transport's flow control: a client that reads slowly
pauses the writer, not the gateway's memory; one that reads nothing for ``send_timeout_s`` is cut
off; and the next pipelined answer waits until the previous one is on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, cast

import httptools

from mmgate.http.request import SINGLE_VALUED, Headers, Request
from mmgate.http.responses import error_body
from mmgate.http.writer import ResponseWriter, date_header, status_line

log = logging.getLogger("mmgate.http")

Handler = Callable[[Request, ResponseWriter], Awaitable[None]]

_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_SPILL_PIECES: Final = 64
"""Body pieces kept as separate objects; beyond this they are copied into one buffer (a body
sent as a million 1-byte chunks would otherwise cost ~45 bytes of memory per byte)."""
_QUEUE_FACTOR: Final = 4
"""Reading pauses at ``max_pipelined`` queued requests, but one read can hold thousands of tiny
ones: beyond ``_QUEUE_FACTOR * max_pipelined`` the rest of that read is refused (429)."""
_RAW_HEAD_SLACK: Final = 256 * 1024
"""Raw bytes a head may span beyond ``max_header_bytes`` before httptools' own buffering is cut
short (the exact limit is applied to the parsed names and values)."""

_FRAMING_SLACK: Final = 1024 * 1024
"""Raw bytes a chunked body may span beyond ``max_body_bytes``: its chunk-size lines and
extensions count toward the limit (httptools streams extensions past us unseen, so the raw
bytes read are what is counted); the slack covers one read's worth of a following request and
the framing of an ordinary chunked body."""
_MAX_LENGTH_DIGITS: Final = 20
"""Longest Content-Length accepted (2**64 has 20 digits; llhttp refuses larger values but lets
any number of leading zeros through)."""

# What the connection's single timer is waiting for.
_NONE, _IDLE, _HEAD, _BODY, _LINGER = range(5)


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = 64 * 1024 * 1024
    max_header_bytes: int = 64 * 1024  # request line and headers together (431 beyond)
    header_timeout_s: float = 10.0  # from the first byte of a request (or the connect) to its blank line
    body_timeout_s: float = 30.0  # from the end of the head to the end of the body
    keepalive_timeout_s: float = 75.0  # an idle keep-alive connection is closed after this
    max_pipelined: int = 16  # complete requests queued behind the one being answered
    send_timeout_s: float = 60.0  # a client that accepts no response bytes for this long is cut off
    linger_s: float = 2.0  # after a refusal: drain what the client still sends, then close
    # Request headers refused when repeated beyond the HTTP layer's own (request.SINGLE_VALUED):
    # those the application reads as one value.
    single_valued_headers: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A terminal error, answered in its turn, after which the connection closes."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    stop_reading: bool = False  # stop taking the client's bytes now (a body past the limit)


class HttpConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, handler: Handler, limits: ServerLimits, server: HttpServer) -> None:
        self._handler = handler
        self._limits = limits
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._remote: str | None = None
        # The request being parsed.
        self._url = b""
        self._raw_headers: list[tuple[str, str]] = []
        self._head_size = 0
        # Raw bytes read of the head being parsed, or of a chunked body (its size lines and extensions
        # count toward the body limit); -1 when neither. One attribute for both: at 30 attributes
        # the instance dict stops sharing its keys and every request costs ~1 us more.
        self._raw = 0
        self._in_head = False
        self._begun = False  # a byte of some request has arrived on this connection
        self._headers: Headers | None = None
        self._body: list[bytes] = []
        self._spill: bytearray | None = None  # the body so far, once it came in many small pieces
        self._body_size = 0
        # Requests waiting for their turn, and the one being answered.
        self._queue: deque[tuple[Request, bool] | _Refusal] = deque()
        self._task: asyncio.Task[None] | None = None
        self._writer: ResponseWriter | None = None
        self._reading_paused = False
        self._dead = False  # a refusal is queued: everything the client sends now is discarded
        self._closing = False  # close once the current response is finished (shutdown)
        self._lost = False
        # Write-side flow control.
        self.writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        # One lazily re-armed timer serves the idle, head, body and linger deadlines.
        self._deadline = 0.0
        self._deadline_kind = _NONE
        self._timer: asyncio.TimerHandle | None = None

    @property
    def queued(self) -> int:
        """Pipelined requests parsed and waiting for their turn (reading pauses at the limit)."""
        return len(self._queue)

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        peer = transport.get_extra_info("peername")
        self._remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        self._server.connections.add(self)
        self._in_head = True  # a fresh connection owes its first head within header_timeout_s
        self._set_deadline(_HEAD, self._limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._dead:
            return
        if self._in_head:
            self._raw += len(data)
            if self._raw > self._limits.max_header_bytes + _RAW_HEAD_SLACK:
                self._refuse_head_size()
                return
        elif self._raw >= 0:  # a chunked body
            self._raw += len(data)
            if self._raw > self._limits.max_body_bytes + _FRAMING_SLACK:
                limit = self._limits.max_body_bytes
                self._refuse(_too_large(f"more than {limit} bytes of chunked body and framing sent", limit))
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(_Refusal(400, "protocol upgrades are not supported; speak HTTP/1.1"))
        except httptools.HttpParserCallbackError as exc:
            # Our callbacks refuse client mistakes themselves; anything raised in them is a bug.
            self._callback_failed(exc.__context__)
        except httptools.HttpParserError as exc:
            reason = str(exc) or type(exc).__name__
            self._refuse(_Refusal(400, f"malformed HTTP request: {reason}"))

    def eof_received(self) -> bool | None:
        # A client that half-closes is treated as gone and its handler cancelled: HTTP/1.1 frames
        # requests by Content-Length or chunking (RFC 9112 §6), so no client needs a half-close to
        # end one, and an EOF mid-request almost always means the client stopped (a killed
        # process, a timed-out SDK); keeping its model work running would burn GPU for nobody.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._server.connections.discard(self)
        self._deadline_kind = _NONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()
        writer = self._writer
        if self._task is not None and writer is not None and not writer.finished:
            self._task.cancel()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("the client connection was lost"))
        self._drain_waiter = None
        self._server.connection_closed()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        waiter = self._drain_waiter
        self._drain_waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        """Wait until the transport's buffer is below its low-water mark again."""
        if self._lost:
            raise ConnectionResetError("the client connection was lost")
        if not self.writing_paused:
            return
        waiter = self._drain_waiter
        if waiter is None:
            waiter = self._drain_waiter = self._loop.create_future()
        try:
            async with asyncio.timeout(self._limits.send_timeout_s):
                await waiter
        except TimeoutError:
            self._drain_waiter = None
            self.abort()  # held an upstream request (and an admission slot) for nobody
            seconds = self._limits.send_timeout_s
            raise ConnectionResetError(f"the client accepted no bytes for {seconds:g} s") from None

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._begun = True
        self._url = b""
        self._raw_headers = []
        self._head_size = 0
        self._body = []
        self._body_size = 0
        if not self._in_head:
            self._in_head = True
            self._raw = 0
            self._set_deadline(_HEAD, self._limits.header_timeout_s)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._dead:
            return
        self._head_size += len(name) + len(value) + 4
        if self._head_size > self._limits.max_header_bytes:
            self._refuse_head_size()
            return
        self._raw_headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if self._dead:
            return
        self._in_head = False
        self._raw = -1
        headers = self._headers = Headers(self._raw_headers, self._server.single_valued)
        self._raw_headers = []  # trailers, if any, land here and are dropped
        if self._head_size > self._limits.max_header_bytes:  # a long target and no header after it
            self._refuse_head_size()
            return
        repeated = headers.repeated
        if repeated == "host" or ("host" not in headers and self._parser.get_http_version() != "1.0"):
            # RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request with no Host header
            # or with more than one.
            self._refuse(_Refusal(400, "an HTTP/1.1 request needs exactly one Host header", "Host"))
            return
        if repeated is not None:
            self._refuse(
                _Refusal(
                    400,
                    f"the {repeated} header appears more than once; send it once",
                    repeated,
                    "duplicate_header",
                )
            )
            return
        limit = self._limits.max_body_bytes
        declared = headers.get("content-length")
        if declared is None:
            coding = headers.get("transfer-encoding")
            # llhttp insists on chunked last; anything before it (gzip, chunked) is a coding the
            # gateway would forward undone, under a Content-Length of its own. RFC 9112 §6.1 suggests
            # 501; a 400 keeps a client's mistake out of the gateway's 5xx (as llhttp's own refusals).
            if coding is not None and coding.lower() != "chunked":
                self._refuse(
                    _Refusal(
                        400,
                        f"unsupported Transfer-Encoding {coding[:64]!r}; send chunked or a Content-Length",
                        "Transfer-Encoding",
                        "unsupported_transfer_encoding",
                    )
                )
                return
            if coding is not None:
                self._raw = 0
        elif len(declared) > _MAX_LENGTH_DIGITS:  # llhttp allows leading zeros: no int() of 4,300 digits
            self._refuse(
                _Refusal(
                    400,
                    f"Content-Length has {len(declared)} digits; at most {_MAX_LENGTH_DIGITS} are accepted",
                    "Content-Length",
                    "invalid_content_length",
                )
            )
            return
        elif declared.isdigit() and int(declared) > limit:
            self._refuse(_too_large(f"{int(declared)} bytes declared", limit))
            return
        if self._parser.should_upgrade() and self._upgrade_loses_body(headers, declared):
            return
        expect = headers.get("expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                self._refuse(_Refusal(417, f"unsupported Expect header: {expect[:64]!r}", "Expect"))
                return
            # Only when nothing is ahead of it: an interim response must not split another one.
            if self._task is None and not self._queue and self.transport is not None:
                self.transport.write(_CONTINUE)
        self._set_deadline(_BODY, self._limits.body_timeout_s)

    def _upgrade_loses_body(self, headers: Headers, declared: str | None) -> bool:
        """An ``Upgrade`` request or CONNECT: llhttp hands what follows its head to the new
        protocol, so a body would be lost (the route would see an empty one) and CONNECT would get
        two answers. Refuse those once, clearly; a bodiless GET with ``Upgrade`` (``curl --http2``
        over http) is served as HTTP/1.1: RFC 9110 §7.8 lets a server ignore an upgrade it does
        not want, and curl then carries on in HTTP/1.1."""
        method = self._parser.get_method()
        if method != b"CONNECT" and (declared in (None, "0") and "transfer-encoding" not in headers):
            return False
        what = "CONNECT is" if method == b"CONNECT" else "a protocol upgrade with a request body is"
        self._refuse(_Refusal(400, f"{what} not supported; send plain HTTP/1.1 without Upgrade", "Upgrade"))
        return True

    def on_body(self, body: bytes) -> None:
        if self._dead:
            return
        self._body_size += len(body)
        if self._body_size > self._limits.max_body_bytes:
            self._refuse(
                _too_large(f"more than {self._limits.max_body_bytes} bytes sent", self._limits.max_body_bytes)
            )
            return
        parts = self._body
        parts.append(body)
        if len(parts) > _SPILL_PIECES:
            spill = self._spill
            if spill is None:
                spill = self._spill = bytearray()
            spill += b"".join(parts)
            parts.clear()

    def on_message_complete(self) -> None:
        if self._dead:
            return
        self._raw = -1
        parts = self._body
        if self._spill is not None:
            self._spill += b"".join(parts)
            parts = [bytes(self._spill)]
            self._spill = None
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._body = []
        target = self._url.decode("latin-1")
        path = target.partition("?")[0]
        if not target.startswith("/"):
            target, path = _origin_form(target)
        headers = self._headers
        assert headers is not None
        self._headers = None
        parser = self._parser
        request = Request(
            parser.get_method().decode("ascii"),
            target,
            path,
            headers,
            body,
            self._remote,
            parser.get_http_version(),
        )
        self._deadline_kind = _NONE
        queue = self._queue
        queue.append((request, parser.should_keep_alive()))
        if self._task is None:
            self._next()
        elif len(queue) >= self._limits.max_pipelined:
            if not self._reading_paused:
                self._reading_paused = True
                if self.transport is not None:
                    self.transport.pause_reading()
            if len(queue) > _QUEUE_FACTOR * self._limits.max_pipelined:
                queue.pop()
                self._refuse(
                    _Refusal(
                        429,
                        f"too many pipelined requests; at most {len(queue)} are queued per connection",
                        None,
                        "too_many_pipelined",
                    )
                )

    # -- answering ----------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the next queued request (or refusal), or wait for one."""
        if self._lost:
            return
        if not self._queue:
            if self._closing:
                self._close()
            elif not self._in_head:
                self._set_deadline(_IDLE, self._limits.keepalive_timeout_s)
            return
        item = self._queue.popleft()
        if self._reading_paused and not self._dead and len(self._queue) < self._limits.max_pipelined // 2:
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        if isinstance(item, _Refusal):
            self._send_refusal(item)
            return
        request, keep_alive = item
        writer = self._writer = ResponseWriter(
            self, http11=request.version == "1.1", keep_alive=keep_alive and not self._closing
        )
        self._task = self._loop.create_task(self._run(request, writer))

    async def _run(self, request: Request, writer: ResponseWriter) -> None:
        try:
            await self._handler(request, writer)
        except asyncio.CancelledError:
            if not writer.finished:
                writer.abort()
            return
        except ConnectionError:  # the client left while we answered
            writer.abort()
            return
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            if writer.started:
                writer.abort()
            elif not self._lost:
                writer.keep_alive = False
                with contextlib.suppress(ConnectionError):
                    writer.send_error(
                        500, "internal gateway error; see the gateway log", code="internal_error"
                    )
        if not writer.finished:
            # A handler that returned without finishing its response is a bug, unless the client
            # left first (the handler saw the write fail and gave up the response).
            if not self._lost and self.transport is not None and not self.transport.is_closing():
                log.error("handler left %s %s unanswered", request.method, request.path)
            writer.abort()
        self._writer = None
        if writer.keep_alive and self.writing_paused:
            # A client pipelining without reading: answer the next one once this one is on its
            # way, or the send buffer grows by one response per request it sends.
            try:
                await self.drain()
            except ConnectionError:
                self._task = None
                return
        self._task = None
        if writer.keep_alive:
            self._next()

    def response_finished(self, keep_alive: bool) -> None:
        """Called by the writer when the last byte of a response is handed to the transport."""
        if not keep_alive or self._closing:
            self._queue.clear()
            self._close()

    def _send_refusal(self, refusal: _Refusal) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._begun:
            self._server.refused(refusal.status)
        body = error_body(refusal.status, refusal.message, param=refusal.param, code=refusal.code)
        head = (
            f"{status_line(refusal.status)}content-type: application/json\r\n{date_header()}"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        # Half-close and keep reading (discarding) for a moment: closing with unread bytes would
        # send a reset that can destroy the answer before the client reads it. (After a body past
        # the limit reading has stopped already: the client gets the linger to read the answer.)
        if transport.can_write_eof():
            transport.write_eof()
            self._set_deadline(_LINGER, self._limits.linger_s)
        else:
            transport.close()

    def _refuse(self, refusal: _Refusal) -> None:
        """Stop parsing; answer ``refusal`` once the responses ahead of it are out; then close."""
        if self._dead:
            return
        self._dead = True
        if refusal.stop_reading and self.transport is not None:
            # A body past the limit: read no more of it. Draining the rest during the linger, as for
            # other refusals, would take in a whole oversized upload (100 MiB against 64 MiB was read
            # to the end); the client, writing, sees the answer, then a reset once the linger ends.
            self.transport.pause_reading()
            self._reading_paused = True
        self._in_head = False
        self._body = []
        self._spill = None
        self._deadline_kind = _NONE
        self._queue.append(refusal)
        if self._task is None:
            self._next()

    def _callback_failed(self, cause: BaseException | None) -> None:
        """A bug in a parser callback: logged by type and place only (the message of an exception
        raised on request bytes may quote them), answered 500 and the connection closed."""
        where = "; ".join(
            f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})"
            for f in traceback.extract_tb(cause.__traceback__ if cause else None)
        )
        log.error("bug in the HTTP request parser callbacks: %s in %s", type(cause).__name__, where or "?")
        self._refuse(_Refusal(500, "internal gateway error; see the gateway log", None, "internal_error"))

    def _refuse_head_size(self) -> None:
        limit = self._limits.max_header_bytes
        if len(self._url) > limit:
            self._refuse(
                _Refusal(414, f"request target too long; the limit is {limit} bytes", None, "uri_too_long")
            )
            return
        self._refuse(
            _Refusal(431, f"request headers too large; the limit is {limit} bytes", None, "headers_too_large")
        )

    # -- deadlines ----------------------------------------------------------------------------

    def _set_deadline(self, kind: int, seconds: float) -> None:
        self._deadline_kind = kind
        deadline = self._deadline = self._loop.time() + seconds
        if self._lost:
            return
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:  # fires first, then re-arms for the rest
                return
            timer.cancel()
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        kind = self._deadline_kind
        if kind == _NONE or self._lost:
            return
        if self._loop.time() < self._deadline:  # pushed back since it was armed
            self._timer = self._loop.call_at(self._deadline, self._on_timer)
            return
        self._deadline_kind = _NONE
        if kind == _HEAD and not self._begun:  # connected, never asked anything: just close
            self._close()
        elif kind == _HEAD:
            seconds = self._limits.header_timeout_s
            self._refuse(
                _Refusal(
                    408, f"The request headers did not arrive within {seconds:g} s.", None, "header_timeout"
                )
            )
        elif kind == _BODY:
            seconds = self._limits.body_timeout_s
            self._refuse(
                _Refusal(
                    408, f"The request body did not arrive within {seconds:g} s.", "body", "body_timeout"
                )
            )
        elif (kind == _IDLE and self._task is None) or kind == _LINGER:
            self._close()

    # -- closing ------------------------------------------------------------------------------

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        """Stop taking requests: close now when idle, else once the current response is out."""
        self._closing = True
        if self._task is None:
            self._close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _too_large(detail: str, limit: int) -> _Refusal:
    message = f"request body too large: {detail}; the limit is {limit}"
    return _Refusal(413, message, "body", "body_too_large", stop_reading=True)


def _origin_form(target: str) -> tuple[str, str]:
    """``(target, path)`` of a target not in origin form. Absolute-form (``http://host/p?q``, as
    sent to proxies) becomes ``/p?q``: the host a client names is never passed on. ``*`` and
    authority-form (CONNECT) stay as they are; no route matches them."""
    if target == "*":
        return target, target
    try:
        url = httptools.parse_url(target.encode("latin-1"))
    except httptools.HttpParserInvalidURLError:
        return target, target
    if not url.schema:  # authority-form, ``host:port``
        return target, target
    path = url.path.decode("latin-1") if url.path else "/"
    return (f"{path}?{url.query.decode('latin-1')}" if url.query else path), path


class HttpServer:
    """Listening sockets and their connections, for one handler; :meth:`close` drains them."""

    def __init__(
        self, handler: Handler, limits: ServerLimits, *, on_refusal: Callable[[int], None] | None = None
    ) -> None:
        self.handler = handler
        self.limits = limits
        self.single_valued = SINGLE_VALUED | limits.single_valued_headers
        self.on_refusal = on_refusal
        self.connections: set[HttpConnection] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self._drained: asyncio.Event | None = None

    def _protocol(self) -> HttpConnection:
        return HttpConnection(self.handler, self.limits, self)

    async def listen(self, host: str, port: int, *, reuse_port: bool = False, backlog: int = 1024) -> int:
        """Start listening; returns the bound port (useful with ``port=0``)."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            self._protocol, host, port, backlog=backlog, reuse_address=True, reuse_port=reuse_port or None
        )
        self._servers.append(server)
        sockets = server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def refused(self, status: int) -> None:
        if self.on_refusal is not None:
            self.on_refusal(status)

    def connection_closed(self) -> None:
        if not self.connections and self._drained is not None:
            self._drained.set()

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop listening, let in-flight responses finish (up to ``timeout_s``), then cut the rest."""
        for server in self._servers:
            server.close()
        self._drained = asyncio.Event()
        for connection in list(self.connections):
            connection.shutdown()
        if self.connections:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._drained.wait()
        for connection in list(self.connections):
            connection.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await server.wait_closed()
        self._servers.clear()
