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
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, cast

import httptools

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


class Pieces(Protocol):
    """A body held as several buffers (a spliced request body, :class:`mmgate.request.pieces.BodyPieces`):
    ``len()`` is its size in bytes, iteration yields its buffers in order, again on a retry."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[bytes | memoryview]: ...


Body = bytes | bytearray | memoryview | Pieces
_CONTIGUOUS = (bytes, bytearray, memoryview)


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

    def forget(self, conn: _Conn) -> None:
        """Take ``conn`` off the idle stack if it is there (the server closed it while idle)."""
        with contextlib.suppress(ValueError):
            self.idle.remove(conn)


Finish = Callable[["_Conn", bool], None]
Interim = Callable[[int, list[tuple[str, str]]], None]
"""Told of each informational (1xx) response before the final one: its status and headers."""
"""How a connection in use goes back to its pool: ``finish(conn, reuse)`` (the pool's); a
response calls it at its end, the connection itself when an exchange fails."""


class _Conn(asyncio.Protocol):
    """One upstream connection; carries one request/response exchange at a time.

    The protocol callbacks fill the current response's state; the caller's coroutine waits on a
    single future (``_waiter``) resolved with True when something happened, False when the pool's
    ticker finds the wait silent for ``read_timeout_s`` (:meth:`expire_wait`).

    What the pool and :class:`UpstreamResponse` use is public: :meth:`exchange`, the head
    (``status``, ``headers``), the body (:meth:`poll`, :meth:`wait_body`, ``ended``), whether it
    may be reused (``reusable``), the idle state (:meth:`park`, :meth:`unpark`, ``idle_since``)
    and the ways to end it (:meth:`abort`, :meth:`close`). Everything else is the protocol's own.
    """

    __slots__ = (
        "_buffered",
        "_complete",
        "_exc",
        "_fields",
        "_finish",
        "_head_bytes",
        "_head_done",
        "_head_only",
        "_in_idle",
        "_interim",
        "_keep_alive",
        "_loop",
        "_lost",
        "_on_interim",
        "_parser",
        "_paused",
        "_pieces",
        "_read_timeout_s",
        "_received",
        "_transport",
        "_unsent",
        "_wait_since",
        "_waiter",
        "headers",
        "idle_since",
        "origin",
        "status",
    )

    def __init__(
        self, origin: _Origin, loop: asyncio.AbstractEventLoop, read_timeout_s: float, finish: Finish
    ) -> None:
        self.origin = origin
        self.idle_since = 0.0
        self._loop = loop
        self._read_timeout_s = read_timeout_s
        self._finish = finish
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._wait_since = 0.0
        self._lost = False
        self._in_idle = False
        self._begin(head_only=False)

    def _begin(self, *, head_only: bool) -> None:
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self._fields: list[tuple[str, str]] | _Discard = self.headers  # the head's list, then a sink
        self._head_bytes = 0
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._head_done = False
        self._head_only = head_only
        self._interim = False
        self._on_interim: Interim | None = None
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
            self._leave_idle_stack()
            self.abort()
            return
        self._received = True
        if not self._head_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_RESPONSE_HEAD:
                self._keep_alive = False
                if self._exc is None:
                    self._exc = UpstreamProtocolError(
                        f"upstream {self.origin.label} sent a response head over {MAX_RESPONSE_HEAD} bytes"
                    )
                self.abort()
                self._wake()
                return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # 101 is no HTTP/1.1 answer
            self._keep_alive = False
            if not self._complete and self._exc is None:
                label = self.origin.label
                self._exc = UpstreamProtocolError(f"malformed HTTP response from upstream {label}")
            self.abort()
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._keep_alive = False
        if self._in_idle:
            self._leave_idle_stack()
            return
        if not self._complete and self._exc is None:
            label = self.origin.label
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
            self._leave_idle_stack()  # at once, not when connection_lost runs a tick later
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
            # 100 Continue and other interim responses: wait for the final one (the caller may
            # read them: a routing sidecar's 103 says which stage pods are done).
            self._interim = True
            interim = self.headers
            self.headers = self._fields = []
            if self._on_interim is not None:
                self._on_interim(status, interim)
            return
        self._on_interim = None  # the final head: no more interim responses, no reference kept
        self.status = status
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

    # -- one exchange, for the pool and the response ---------------------------------------------

    async def exchange(
        self,
        head: bytes,
        body: Body,
        size: int,
        *,
        reused: bool,
        head_only: bool,
        on_interim: Interim | None = None,
    ) -> UpstreamResponse:
        """Send one request and return its response once the final head has arrived (each
        interim one before it handed to ``on_interim``). On any failure the connection goes back
        to the pool as not reusable (``finish(conn, False)``); :class:`_Stale` means a ``reused``
        connection was closed before any response byte."""
        self._begin(head_only=head_only)
        self._on_interim = on_interim
        transport = self._transport
        assert transport is not None
        try:
            if isinstance(body, _CONTIGUOUS):
                if size <= SMALL_BODY:
                    transport.write(head + body if size else head)
                else:
                    transport.write(head)
                    transport.write(body if isinstance(body, memoryview) else memoryview(body))
            elif size <= SMALL_BODY:
                transport.write(b"".join((head, *body)))
            else:  # one writev on uvloop, the pieces handed to the kernel as they are
                transport.writelines((head, *body))  # (asyncio's 3.11 transports join them)
        except (OSError, RuntimeError):  # uvloop refuses writes once the transport is closed
            self._exc = UpstreamResetError(
                f"upstream {self.origin.label} closed the connection before responding"
            )
        try:
            while not self._head_done:
                if self._exc is not None:
                    if reused and not self._received and isinstance(self._exc, UpstreamResetError):
                        raise _Stale
                    raise self._exc
                if not await self._wait():
                    raise TimeoutError(
                        f"upstream {self.origin.label} sent no response within {self._read_timeout_s:g}s"
                    )
        except BaseException:
            self._finish(self, False)
            raise
        return UpstreamResponse(self, self._finish)

    def poll(self) -> bytes | None:
        """The body bytes received since the last call; b"" once the body ended; None when there
        is nothing yet (then :meth:`wait_body`). Raises the exchange's error if it failed."""
        if self._pieces:
            return self._take()
        if self._complete:
            return b""
        if self._exc is not None:
            raise self._exc
        return None

    async def wait_body(self) -> None:
        """Wait for the next body event; after ``read_timeout_s`` of silence the connection is
        aborted and TimeoutError raised."""
        if not await self._wait():
            self.abort()
            raise TimeoutError(
                f"upstream {self.origin.label} sent no body bytes for {self._read_timeout_s:g}s"
            )

    @property
    def ended(self) -> bool:
        """The body's end arrived and every byte before it was taken."""
        return self._complete and not self._pieces

    @property
    def reusable(self) -> bool:
        """The exchange ended cleanly on a connection the server keeps open, the whole request
        left our buffer (a server may answer before reading it all), and nothing is left unread."""
        return (
            self._complete
            and self._keep_alive
            and not self._pieces
            and not self._lost
            and self._transport is not None
            and self._transport.get_write_buffer_size() == 0
        )

    def expire_wait(self, silent_since: float, now: float) -> None:
        """The pool's ticker: a wait that began at or before ``silent_since`` ends as a timeout,
        unless the request body is still draining into the socket (an upload is not silence)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._wait_since <= silent_since:
            if self._upload_moved():
                self._wait_since = now
            else:
                waiter.set_result(False)

    # -- the idle state and the end, for the pool ------------------------------------------------

    def park(self) -> None:
        """Mark the connection idle from now (the pool put it on its origin's idle stack)."""
        self.idle_since = time.monotonic()
        self._in_idle = True

    def unpark(self) -> None:
        """The connection is no longer idle (taken for a request, or being closed)."""
        self._in_idle = False

    def abort(self) -> None:
        """Cut the connection now (a model server learns this way that the client went away)."""
        self._keep_alive = False
        if not self._complete and self._exc is None:
            # Ours, not the upstream's: an EOF that follows must not end a close-delimited body.
            label = self.origin.label
            self._exc = UpstreamResetError(f"the gateway closed its connection to upstream {label}")
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close an idle connection gracefully (a FIN after anything still buffered)."""
        if self._transport is not None:
            self._transport.close()

    # -- internals -------------------------------------------------------------------------------

    def _leave_idle_stack(self) -> None:
        """The server closed (or wrote on) this idle connection: it must not be handed out."""
        self._in_idle = False
        self.origin.forget(self)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _has_framing(self) -> bool:
        for name, _ in self.headers:
            lower = name.lower()
            if lower == "content-length" or lower == "transfer-encoding":
                return True
        return False

    async def _wait(self) -> bool:
        """Wait for the next event; False when read_timeout_s passes without one.

        No timer per wait (call_later + cancel costs ~3 µs on uvloop, a fifth of a request): the
        pool's ticker, running while any connection is in use, expires waits that started more
        than read_timeout_s ago (:meth:`expire_wait`).
        """
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiter = waiter
        self._wait_since = time.monotonic()
        happened = await waiter
        self._waiter = None
        return happened

    def _upload_moved(self) -> bool:
        """True if the transport's write buffer changed size since the last look."""
        transport = self._transport
        size = transport.get_write_buffer_size() if transport is not None else 0
        moved = size != self._unsent
        self._unsent = size
        return moved

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


class UpstreamResponse:
    """A response whose head has arrived; the body is read piece by piece with ``read()``.

    End with ``release()`` (the connection goes back to the pool when that is safe) or ``close()``
    (the connection is dropped, which is how a model server learns that the client went away).
    """

    __slots__ = ("_conn", "_finish", "headers", "status")

    def __init__(self, conn: _Conn, finish: Finish) -> None:
        self._conn: _Conn | None = conn
        self._finish = finish
        self.status: int = conn.status
        self.headers: list[tuple[str, str]] = conn.headers

    async def read(self) -> bytes:
        """The body bytes received since the last call, as soon as there are any; b"" at the end."""
        conn = self._conn
        if conn is None:
            return b""
        while True:
            data = conn.poll()
            if data is not None:
                return data
            await conn.wait_body()

    @property
    def ended(self) -> bool:
        """True when the body's end has arrived and every byte before it was read: the next
        ``read()`` returns b"" without waiting. A relay uses it to send its last piece together
        with its own end of the body."""
        conn = self._conn
        return conn is None or conn.ended

    def release(self) -> None:
        """Return the connection to the pool if the body was read to the end, else close it."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        self._finish(conn, conn.reusable)

    def close(self) -> None:
        """Drop the connection now, whatever its state."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        self._finish(conn, False)

    def __del__(self) -> None:
        # A response dropped without release() or close() must not hold its upstream request
        # (and the model server's work) open: drop the connection.
        conn = self._conn
        if conn is not None:
            self._conn = None
            with contextlib.suppress(Exception):  # the loop may already be closed
                self._finish(conn, False)


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
        untrusted_hint: str = "",
    ) -> None:
        # Used for https origins only; by default the system's trust store, hostnames checked.
        self._ssl_context = ssl_context
        # Appended to the error when a server's certificate is not verified: how this
        # application's operator trusts a private CA (the gateway names its config key).
        self._untrusted_hint = f"; {untrusted_hint}" if untrusted_hint else ""
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
        on_interim: Interim | None = None,
    ) -> UpstreamResponse:
        """Send a request and return once the final response head has arrived.

        ``headers`` go out as given (the caller drops hop-by-hop ones); the pool adds Host and
        Content-Length. A reused connection found closed before any response byte is retried once
        on a fresh connection; nothing else is retried (the request may have been acted on).
        ``tls`` speaks https (certificate and hostname verified by the pool's SSL context);
        connections are pooled per (scheme, host, port). ``on_interim`` is called with the status
        and headers of each informational (1xx) response that precedes the final one, as it
        arrives (RFC 9110 §15.2; their heads count towards the response head's size limit).
        """
        if self._closed:
            raise RuntimeError("UpstreamPool is closed")
        origin = self._origins.get((host, port, tls))
        if origin is None:
            origin = self._origins[(host, port, tls)] = _Origin(host, port, tls)
        size = body.nbytes if isinstance(body, memoryview) else len(body)
        head = _encode_head(method, target, origin.host_header, headers, size)
        head_only = method == "HEAD"
        if self._ticker is None:  # the ticker expires silent waits while a connection is in use
            self._arm()
        conn = self._checkout(origin)
        if conn is not None:
            try:
                return await conn.exchange(
                    head, body, size, reused=True, head_only=head_only, on_interim=on_interim
                )
            except _Stale:  # (a try, not contextlib.suppress: three Python calls per request)
                pass
        conn = await self._connect(origin)
        return await conn.exchange(head, body, size, reused=False, head_only=head_only, on_interim=on_interim)

    async def close(self) -> None:
        """Close every connection, idle or in use (in-flight reads fail with UpstreamResetError)."""
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for origin in self._origins.values():
            idle, origin.idle = origin.idle, []
            for conn in idle:
                conn.unpark()
                conn.abort()
        in_use, self._in_use = self._in_use, set()
        for conn in in_use:
            conn.abort()

    # -- connections -----------------------------------------------------------------------------

    async def _connect(self, origin: _Origin) -> _Conn:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if origin.tls:
            context = self._ssl_context
            if context is None:
                context = self._ssl_context = ssl.create_default_context()
        read_timeout_s, finish = self._read_timeout_s, self._finish
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Conn(origin, loop, read_timeout_s, finish),
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.host if context is not None else None,
                )
        except ssl.SSLCertVerificationError as exc:
            raise UpstreamTLSError(
                f"TLS certificate of upstream {origin.label} was not verified "
                f"({exc.verify_message or exc.reason}){self._untrusted_hint}"
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
            conn.abort()
            raise RuntimeError("UpstreamPool is closed")
        self._in_use.add(conn)
        return conn

    def _checkout(self, origin: _Origin) -> _Conn | None:
        idle = origin.idle
        if not idle:
            return None
        conn = idle.pop()
        conn.unpark()
        if time.monotonic() - conn.idle_since > self._idle_timeout_s:
            # The newest idle connection is too old, so all of them are.
            idle.append(conn)
            self._evict(origin, len(idle))
            return None
        self._in_use.add(conn)
        return conn

    def _finish(self, conn: _Conn, reuse: bool) -> None:
        """``conn`` is no longer in use: back on its origin's idle stack when ``reuse``, else cut."""
        self._in_use.discard(conn)
        if not reuse or self._closed:
            conn.abort()
            return
        origin = conn.origin
        idle = origin.idle
        if len(idle) >= self._max_idle:
            if self._max_idle <= 0:
                conn.abort()
                return
            self._evict(origin, len(idle) - self._max_idle + 1)
        conn.park()
        idle.append(conn)
        if self._ticker is None:
            self._arm()

    def _evict(self, origin: _Origin, count: int) -> None:
        """Close the ``count`` oldest idle connections of an origin."""
        idle = origin.idle
        old, origin.idle = idle[:count], idle[count:]
        for conn in old:
            conn.unpark()
            conn.close()

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
            conn.expire_wait(silent_since, now)
        idle_since = now - self._idle_timeout_s
        any_idle = False
        for origin in self._origins.values():
            idle = origin.idle
            expired = 0
            while expired < len(idle) and idle[expired].idle_since <= idle_since:
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
