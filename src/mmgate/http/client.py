"""Keep-alive HTTP/1.1 client pool for the gateway's upstream hop.

The gateway forwards every request to a model server and relays the answer; a general-purpose
client (aiohttp.ClientSession) spends most of a small request's CPU on features this hop never
uses. This pool is the lean version: an asyncio Protocol per connection, llhttp (httptools) for
response parsing, one write per small request, per-origin LIFO idle lists (the most recently used
connection is the least likely to have been closed by the server), and no total timeout — the
caller owns the request deadline, the pool only bounds connects and silences. ``https`` origins
are pooled apart from plain ones and pay for TLS only at connect (the handshake verifies the
certificate and hostname); plain http never touches ``ssl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Sequence
from typing import cast

import httptools

from mmgate.request.pieces import BodyPieces
from mmgate.tls import CA_OPTION

__all__ = [
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamResetError",
    "UpstreamResponse",
    "UpstreamTLSError",
]

# A body up to this size is joined to the head and sent in one write (one segment, one syscall);
# a larger one is written after the head as it is held (a memoryview, or the pieces of a spliced
# body in one vectored write) so it is never copied by us.
SMALL_BODY = 64 * 1024
# Unread response bytes above which the socket stops being read (back-pressure to the upstream).
READ_HIGH_WATER = 1024 * 1024
# Response head bytes (status line, headers, interim responses) beyond which the upstream is cut
# off: llhttp does not bound them, and headers are kept until the head ends.
MAX_RESPONSE_HEAD = 256 * 1024

Body = bytes | bytearray | memoryview | BodyPieces


class UpstreamError(OSError):
    """The upstream hop failed; messages name host:port and never carry headers or bodies."""


class UpstreamConnectError(UpstreamError):
    """No connection could be made (refused, unreachable, name not resolved, connect timeout)."""


class UpstreamTLSError(UpstreamConnectError):
    """The TLS handshake failed: most often the server's certificate was not verified."""


class UpstreamResetError(UpstreamError):
    """The connection was lost before the response head or in the middle of the body."""


class UpstreamProtocolError(UpstreamResetError):
    """The upstream sent something that is not valid HTTP/1.1 (the connection is dropped)."""


class _Discard:
    """Where response trailers go: nowhere (an upstream could send them without end)."""

    __slots__ = ()

    def append(self, _field: tuple[str, str]) -> None:
        return None


_DISCARD = _Discard()


class _Stale(Exception):
    """A reused keep-alive connection was already closed by the server: retry on a fresh one."""


class _Origin:
    """One scheme://host:port: its idle connections (a LIFO stack, newest last) and Host header."""

    __slots__ = ("host", "host_header", "idle", "label", "port", "tls")

    def __init__(self, host: str, port: int, tls: bool) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        name = f"[{host}]" if ":" in host else host
        self.label = f"https://{name}:{port}" if tls else f"{name}:{port}"
        self.host_header = name if port == (443 if tls else 80) else f"{name}:{port}"
        self.idle: list[_Conn] = []


class _Conn(asyncio.Protocol):
    """One upstream connection; carries one request/response exchange at a time.

    The protocol callbacks fill the current response's state; the caller's coroutine waits on a
    single future (``_waiter``) resolved with True when something happened, False on read timeout.
    """

    __slots__ = (
        "_buffered",
        "_complete",
        "_exc",
        "_fields",
        "_head_bytes",
        "_head_done",
        "_head_only",
        "_headers",
        "_idle_since",
        "_in_idle",
        "_interim",
        "_keep_alive",
        "_loop",
        "_lost",
        "_origin",
        "_parser",
        "_paused",
        "_pieces",
        "_pool",
        "_received",
        "_status",
        "_transport",
        "_unsent",
        "_wait_since",
        "_waiter",
    )

    def __init__(self, pool: UpstreamPool, origin: _Origin, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pool = pool
        self._origin = origin
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._wait_since = 0.0
        self._lost = False
        self._in_idle = False
        self._idle_since = 0.0
        self._begin(head_only=False)

    def _begin(self, *, head_only: bool) -> None:
        self._status = 0
        self._headers: list[tuple[str, str]] = []
        self._fields: list[tuple[str, str]] | _Discard = self._headers  # the head's list, then a sink
        self._head_bytes = 0
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._head_done = False
        self._head_only = head_only
        self._interim = False
        self._complete = False
        self._keep_alive = False
        self._received = False
        self._unsent = 0
        self._exc: UpstreamError | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, but it has the same methods.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Nagle + delayed ACK would hold a small write back by up to 40 ms.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self._in_idle:
            # Nothing is owed on an idle connection: whatever this is, the stream is unusable.
            self._pool._forget_idle(self)
            self._abort()
            return
        self._received = True
        if not self._head_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_RESPONSE_HEAD:
                self._keep_alive = False
                if self._exc is None:
                    self._exc = UpstreamProtocolError(
                        f"upstream {self._label()} sent a response head over {MAX_RESPONSE_HEAD} bytes"
                    )
                self._abort()
                self._wake()
                return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # 101 is no HTTP/1.1 answer
            self._keep_alive = False
            if not self._complete and self._exc is None:
                self._exc = UpstreamProtocolError(f"malformed HTTP response from upstream {self._label()}")
            self._abort()
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._keep_alive = False
        if self._in_idle:
            self._pool._forget_idle(self)
            return
        if not self._complete and self._exc is None:
            label = self._label()
            if self._head_done:
                if exc is None and not self._has_framing():
                    self._complete = True  # a close-delimited body ends at EOF
                else:
                    self._exc = UpstreamResetError(f"upstream {label} closed the connection mid-body")
            else:
                how = "reset" if exc is not None else "closed"
                self._exc = UpstreamResetError(f"upstream {label} {how} the connection before responding")
        self._wake()

    def eof_received(self) -> bool | None:
        if self._in_idle:
            self._pool._forget_idle(self)  # at once, not when connection_lost runs a tick later
        return None  # close our side too; connection_lost follows

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:
            raise UpstreamProtocolError("a second response arrived for one request")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            # 100 Continue and other interim responses: wait for the final one.
            self._interim = True
            self._headers = self._fields = []
            return
        self._status = status
        self._head_done = True
        # Trailers (after a chunked body) are dropped: merged into the head they would reach the
        # client as headers whenever the whole response arrived before the head was relayed.
        self._fields = _DISCARD
        if self._head_only:
            # llhttp does not know the request was HEAD and would wait for a body that never
            # comes; the response is complete, and the connection is closed on release.
            self._complete = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._head_only:
            return
        self._pieces.append(body)
        self._buffered += len(body)
        if self._buffered > READ_HIGH_WATER and not self._paused:
            self._paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive() and not self._head_only
        self._wake()

    # -- used by the pool and the response -------------------------------------------------------

    def _label(self) -> str:
        return self._origin.label

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _has_framing(self) -> bool:
        for name, _ in self._headers:
            lower = name.lower()
            if lower == "content-length" or lower == "transfer-encoding":
                return True
        return False

    async def _wait(self) -> bool:
        """Wait for the next event; False when read_timeout_s passes without one.

        No timer per wait (call_later + cancel costs ~3 µs on uvloop, a fifth of a request): the
        pool's ticker expires waits that started more than read_timeout_s ago.
        """
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiter = waiter
        self._wait_since = time.monotonic()
        pool = self._pool
        if pool._ticker is None:
            pool._arm()
        happened = await waiter
        self._waiter = None
        return happened

    def _sent(self) -> bool:
        """True once the whole request left the transport's buffer (a server may answer early)."""
        transport = self._transport
        return transport is not None and transport.get_write_buffer_size() == 0

    def _upload_moved(self) -> bool:
        """True if the transport's write buffer changed size since the last look."""
        transport = self._transport
        size = transport.get_write_buffer_size() if transport is not None else 0
        moved = size != self._unsent
        self._unsent = size
        return moved

    def _abort(self) -> None:
        self._keep_alive = False
        if not self._complete and self._exc is None:
            # Ours, not the upstream's: an EOF that follows must not end a close-delimited body.
            self._exc = UpstreamResetError(f"the gateway closed its connection to upstream {self._label()}")
        if self._transport is not None:
            self._transport.abort()

    def _take(self) -> bytes:
        pieces = self._pieces
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self._buffered = 0
        if self._paused:
            self._paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        return data

    async def _exchange(
        self, head: bytes, body: Body, size: int, *, reused: bool, head_only: bool
    ) -> UpstreamResponse:
        """Send one request and wait for the final response head."""
        self._begin(head_only=head_only)
        transport = self._transport
        assert transport is not None
        try:
            if isinstance(body, BodyPieces):
                if size <= SMALL_BODY:
                    transport.write(b"".join((head, *body)))
                else:  # one writev on uvloop, the pieces handed to the kernel as they are
                    transport.writelines((head, *body))  # (asyncio's 3.11 transports join them)
            elif size <= SMALL_BODY:
                transport.write(head + body if size else head)
            else:
                transport.write(head)
                transport.write(body if isinstance(body, memoryview) else memoryview(body))
        except (OSError, RuntimeError):  # uvloop refuses writes once the transport is closed
            self._exc = UpstreamResetError(
                f"upstream {self._label()} closed the connection before responding"
            )
        try:
            while not self._head_done:
                if self._exc is not None:
                    if reused and not self._received and isinstance(self._exc, UpstreamResetError):
                        raise _Stale
                    raise self._exc
                if not await self._wait():
                    raise TimeoutError(
                        f"upstream {self._label()} sent no response within {self._pool._read_timeout_s:g}s"
                    )
        except BaseException:
            self._pool._drop(self)
            raise
        return UpstreamResponse(self)


class UpstreamResponse:
    """A response whose head has arrived; the body is read piece by piece with ``read()``.

    End with ``release()`` (the connection goes back to the pool when that is safe) or ``close()``
    (the connection is dropped, which is how a model server learns that the client went away).
    """

    __slots__ = ("_conn", "headers", "status")

    def __init__(self, conn: _Conn) -> None:
        self._conn: _Conn | None = conn
        self.status: int = conn._status
        self.headers: list[tuple[str, str]] = conn._headers

    async def read(self) -> bytes:
        """The body bytes received since the last call, as soon as there are any; b"" at the end."""
        conn = self._conn
        if conn is None:
            return b""
        while True:
            if conn._pieces:
                return conn._take()
            if conn._complete:
                return b""
            if conn._exc is not None:
                raise conn._exc
            if not await conn._wait():
                conn._abort()
                raise TimeoutError(
                    f"upstream {conn._label()} sent no body bytes for {conn._pool._read_timeout_s:g}s"
                )

    @property
    def ended(self) -> bool:
        """True when the body's end has arrived and every byte before it was read: the next
        ``read()`` returns b"" without waiting. A relay uses it to send its last piece together
        with its own end of the body."""
        conn = self._conn
        return conn is None or (conn._complete and not conn._pieces)

    def release(self) -> None:
        """Return the connection to the pool if the body was read to the end, else close it."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        if conn._complete and conn._keep_alive and not conn._pieces and not conn._lost and conn._sent():
            conn._pool._checkin(conn)
        else:
            conn._pool._drop(conn)

    def close(self) -> None:
        """Drop the connection now, whatever its state."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        conn._pool._drop(conn)

    def __del__(self) -> None:
        # A response dropped without release() or close() must not hold its upstream request
        # (and the model server's work) open: drop the connection.
        conn = self._conn
        if conn is not None:
            self._conn = None
            with contextlib.suppress(Exception):  # the loop may already be closed
                conn._pool._drop(conn)


class UpstreamPool:
    """Keep-alive connections to any number of origins, reused most-recently-used first."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_idle_per_origin: int = 256,
        idle_timeout_s: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # Used for https origins only; by default the system's trust store, hostnames checked.
        self._ssl_context = ssl_context
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_idle = max_idle_per_origin
        self._idle_timeout_s = idle_timeout_s
        self._origins: dict[tuple[str, int, bool], _Origin] = {}
        self._in_use: set[_Conn] = set()
        self._ticker: asyncio.TimerHandle | None = None
        # Timeouts are checked on a tick, so they fire up to an eighth of the timeout late.
        self._tick_s = min(max(min(read_timeout_s / 8, idle_timeout_s / 4), 0.005), 1.0)
        self._closed = False

    @property
    def origins(self) -> frozenset[tuple[str, int, bool]]:
        """``(host, port, tls)`` of every origin the pool has connections (or had) for: http and
        https to the same host and port are different origins, pooled apart."""
        return frozenset(self._origins)

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of https origins: the one given, else the default one made at the
        first https connection; ``None`` while only plain http was used (http never builds one)."""
        return self._ssl_context

    async def request(
        self,
        host: str,
        port: int,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: Body,
        *,
        tls: bool = False,
    ) -> UpstreamResponse:
        """Send a request and return once the final response head has arrived.

        ``headers`` go out as given (the caller drops hop-by-hop ones); the pool adds Host and
        Content-Length. A reused connection found closed before any response byte is retried once
        on a fresh connection; nothing else is retried (the request may have been acted on).
        ``tls`` speaks https (certificate and hostname verified by the pool's SSL context);
        connections are pooled per (scheme, host, port).
        """
        if self._closed:
            raise RuntimeError("UpstreamPool is closed")
        origin = self._origins.get((host, port, tls))
        if origin is None:
            origin = self._origins[(host, port, tls)] = _Origin(host, port, tls)
        size = body.nbytes if isinstance(body, memoryview) else len(body)
        head = _encode_head(method, target, origin.host_header, headers, size)
        head_only = method == "HEAD"
        conn = self._checkout(origin)
        if conn is not None:
            try:
                return await conn._exchange(head, body, size, reused=True, head_only=head_only)
            except _Stale:
                pass
        conn = await self._connect(origin)
        return await conn._exchange(head, body, size, reused=False, head_only=head_only)

    async def close(self) -> None:
        """Close every connection, idle or in use (in-flight reads fail with UpstreamResetError)."""
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for origin in self._origins.values():
            idle, origin.idle = origin.idle, []
            for conn in idle:
                conn._in_idle = False
                conn._abort()
        in_use, self._in_use = self._in_use, set()
        for conn in in_use:
            conn._abort()

    # -- connections -----------------------------------------------------------------------------

    async def _connect(self, origin: _Origin) -> _Conn:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if origin.tls:
            context = self._ssl_context
            if context is None:
                context = self._ssl_context = ssl.create_default_context()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self, origin, loop),
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.host if context is not None else None,
                )
        except ssl.SSLCertVerificationError as exc:
            raise UpstreamTLSError(
                f"TLS certificate of upstream {origin.label} was not verified "
                f"({exc.verify_message or exc.reason}); trust a private CA with {CA_OPTION}"
            ) from None
        except ssl.SSLError as exc:
            raise UpstreamTLSError(
                f"TLS handshake with upstream {origin.label} failed: {exc.reason or type(exc).__name__}"
            ) from None
        except TimeoutError:
            raise UpstreamConnectError(
                f"connecting to upstream {origin.label} timed out after {self._connect_timeout_s:g}s"
            ) from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise UpstreamConnectError(f"cannot connect to upstream {origin.label}: {reason}") from exc
        if self._closed:
            conn._abort()
            raise RuntimeError("UpstreamPool is closed")
        self._in_use.add(conn)
        return conn

    def _checkout(self, origin: _Origin) -> _Conn | None:
        idle = origin.idle
        if not idle:
            return None
        conn = idle.pop()
        conn._in_idle = False
        if time.monotonic() - conn._idle_since > self._idle_timeout_s:
            # The newest idle connection is too old, so all of them are.
            idle.append(conn)
            self._evict(origin, len(idle))
            return None
        self._in_use.add(conn)
        return conn

    def _checkin(self, conn: _Conn) -> None:
        self._in_use.discard(conn)
        if self._closed:
            conn._abort()
            return
        idle = conn._origin.idle
        if len(idle) >= self._max_idle:
            if self._max_idle <= 0:
                conn._abort()
                return
            self._evict(conn._origin, len(idle) - self._max_idle + 1)
        conn._idle_since = time.monotonic()
        conn._in_idle = True
        idle.append(conn)
        if self._ticker is None:
            self._arm()

    def _drop(self, conn: _Conn) -> None:
        self._in_use.discard(conn)
        conn._abort()

    def _forget_idle(self, conn: _Conn) -> None:
        """An idle connection was closed by the server: it must not be handed out."""
        conn._in_idle = False
        with contextlib.suppress(ValueError):
            conn._origin.idle.remove(conn)

    def _evict(self, origin: _Origin, count: int) -> None:
        """Close the ``count`` oldest idle connections of an origin."""
        idle = origin.idle
        old, origin.idle = idle[:count], idle[count:]
        for conn in old:
            conn._in_idle = False
            transport = conn._transport
            if transport is not None:
                transport.close()

    # -- timeouts ----------------------------------------------------------------------------------

    def _arm(self) -> None:
        if not self._closed:
            self._ticker = asyncio.get_running_loop().call_later(self._tick_s, self._tick)

    def _tick(self) -> None:
        """Expire reads silent for read_timeout_s and close connections idle for idle_timeout_s."""
        self._ticker = None
        now = time.monotonic()
        silent_since = now - self._read_timeout_s
        for conn in self._in_use:
            waiter = conn._waiter
            if waiter is not None and not waiter.done() and conn._wait_since <= silent_since:
                if conn._upload_moved():
                    conn._wait_since = now  # a large body is still going out: not silence
                else:
                    waiter.set_result(False)
        idle_since = now - self._idle_timeout_s
        any_idle = False
        for origin in self._origins.values():
            idle = origin.idle
            expired = 0
            while expired < len(idle) and idle[expired]._idle_since <= idle_since:
                expired += 1
            if expired:
                self._evict(origin, expired)
            any_idle = any_idle or bool(origin.idle)
        if self._in_use or any_idle:
            self._arm()


def _encode_head(
    method: str, target: str, host: str, headers: Sequence[tuple[str, str]], length: int
) -> bytes:
    """The request line and headers; refuses CR/LF inside any field (header injection)."""
    if headers:
        block = "\r\n".join(map(": ".join, headers))
        text = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n{block}\r\n\r\n"
    else:
        text = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n\r\n"
    lines = 4 + len(headers)
    if text.count("\n") != lines or text.count("\r") != lines:
        raise ValueError("CR or LF inside the request line or a header of an upstream request")
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        # Not the codec's message: it would quote the character, and header values may be secrets.
        raise ValueError("an upstream request line or header is not latin-1 text") from None
