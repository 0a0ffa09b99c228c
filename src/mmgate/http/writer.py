"""Answering one request: a response head, then the body as whole, length-delimited, chunked or
close-delimited, with write-side back-pressure.

The head is held back until the first body bytes (or the end) so that it leaves with them in one
``write``: one send for the gateway, one wake-up for the client. Framing follows what is known:
a ``content_length`` given to :meth:`ResponseWriter.start` is sent as ``Content-Length`` and
the body relayed as is; otherwise an HTTP/1.1 client gets chunked framing and an HTTP/1.0 client
a body that ends when the connection closes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol

from mmgate.http.responses import Response, error_response

_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_JOIN_BELOW = 16 * 1024
"""Below this a chunk is copied next to its framing (one small write); above, written as a list."""
_LAST_CHUNK = b"0\r\n\r\n"
_LAST_CHUNK_END = b"\r\n" + _LAST_CHUNK


class Channel(Protocol):
    """What a writer needs from its connection."""

    transport: asyncio.Transport | None
    writing_paused: bool

    async def drain(self) -> None: ...

    def response_finished(self, keep_alive: bool) -> None: ...


def status_line(status: int) -> str:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} Status {status}\r\n"


_date_second = 0
_date_header = ""


def date_header() -> str:
    """``date: ...\\r\\n``, formatted once per second."""
    global _date_second, _date_header
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_header = f"date: {formatdate(now, usegmt=True)}\r\n"
    return _date_header


class ResponseWriter:
    """The response to one request. ``start`` then ``write``* then ``end``; or ``send`` once;
    ``abort`` cuts the connection (the client sees a broken response, never a clean end).

    With ``head_only`` set (a HEAD request answered by a GET route) the head goes out exactly as
    for GET, framing headers included, and every body byte is dropped (RFC 9110 §9.3.2).
    """

    __slots__ = (
        "_channel",
        "_chunked",
        "_head",
        "_http11",
        "_remaining",
        "body_bytes",
        "finished",
        "head_only",
        "keep_alive",
        "started",
    )

    def __init__(self, channel: Channel, *, http11: bool, keep_alive: bool) -> None:
        self._channel = channel
        self._http11 = http11
        self.keep_alive = keep_alive
        self.head_only = False
        self.started = False
        self.finished = False
        self._head: bytes | None = None
        self._chunked = False
        self._remaining: int | None = None
        self.body_bytes = 0  # body bytes handed to the transport (framing not counted)

    def _head_bytes(self, status: int, headers: Iterable[tuple[str, str]], length: int | None) -> bytes:
        parts = [status_line(status)]
        parts.extend(f"{name}: {value}\r\n" for name, value in headers)
        parts.append(date_header())
        if length is not None:
            parts.append(f"content-length: {length}\r\n")
        elif self._http11:
            self._chunked = True
            parts.append("transfer-encoding: chunked\r\n")
        else:
            self.keep_alive = False  # HTTP/1.0 without a length: the close ends the body
        if not self.keep_alive:
            parts.append("connection: close\r\n\r\n")
        elif not self._http11:
            parts.append("connection: keep-alive\r\n\r\n")
        else:
            parts.append("\r\n")
        text = "".join(parts)
        try:  # relayed upstream values were decoded as latin-1: this gives their bytes back
            return text.encode("latin-1")
        except UnicodeEncodeError:  # a header of the gateway's own beyond latin-1
            return text.encode("utf-8", "surrogateescape")

    def start(
        self, status: int, headers: Iterable[tuple[str, str]], *, content_length: int | None = None
    ) -> None:
        """Set the status and headers (without framing headers; those come from ``content_length``)."""
        if self.started:
            raise RuntimeError("response already started")
        self.started = True
        self._remaining = content_length
        self._head = self._head_bytes(status, headers, content_length)

    def interim(self, status: int, headers: Iterable[tuple[str, str]]) -> bool:
        """Send an informational (1xx) response now, ahead of the final one (RFC 9110 §15.2).
        Only to an HTTP/1.1 client and before :meth:`start` (a 1xx must not reach an HTTP/1.0
        client, and none may follow the final head); returns whether it was sent."""
        if not 100 <= status < 200 or status == 101:  # 101 switches protocols: not an interim
            raise ValueError(f"not an interim status: {status}")
        transport = self._channel.transport
        if self.started or not self._http11 or transport is None or transport.is_closing():
            return False
        parts = [status_line(status), *(f"{name}: {value}\r\n" for name, value in headers), "\r\n"]
        transport.write("".join(parts).encode("latin-1"))
        return True

    @property
    def buffered_bytes(self) -> int:
        """Bytes written but not yet taken by the kernel (the transport's buffer; 0 once the
        connection is gone): what a client that stops reading costs the gateway."""
        transport = self._channel.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def _transport(self) -> asyncio.Transport:
        transport = self._channel.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client connection is closed")
        return transport

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` now; wait while the client is not keeping up (the transport paused us)."""
        if not data:
            return
        if self.finished or not self.started:
            raise RuntimeError("write() outside start() .. end()")
        self._put(self._transport(), data, b"\r\n")
        if self._channel.writing_paused:
            await self._channel.drain()

    def end(self, data: bytes | bytearray | memoryview = b"") -> None:
        """Finish the body, ``data`` being its last piece. A body shorter than its Content-Length
        is cut, not padded.

        The last piece leaves in the same write as the end of a chunked body (``0\\r\\n\\r\\n``):
        a client that hangs up as soon as it has read the last event (an SSE client at
        ``data: [DONE]``) then cannot come between the two, and the response is complete.
        """
        if self.finished:
            return
        if not self.started:
            raise RuntimeError("end() before start()")
        if self._remaining is not None and len(data) != self._remaining:
            if len(data) > self._remaining:
                raise RuntimeError("more body than the Content-Length announced")
            self.abort()
            return
        transport = self._transport()
        if data:
            self._put(transport, data, _LAST_CHUNK_END)
        else:
            head = self._head
            self._head = None
            if self._chunked and not self.head_only:
                transport.write(head + _LAST_CHUNK if head is not None else _LAST_CHUNK)
            elif head is not None:
                transport.write(head)
        self.finished = True
        self._channel.response_finished(self.keep_alive)

    def _put(
        self, transport: asyncio.Transport, data: bytes | bytearray | memoryview, chunk_end: bytes
    ) -> None:
        """Hand non-empty ``data`` to the transport in its framing, after the held-back head;
        ``chunk_end`` closes its chunk (and, for the last piece, the chunked body)."""
        size = len(data)
        self.body_bytes += size
        if self._remaining is not None:
            if size > self._remaining:
                raise RuntimeError("more body than the Content-Length announced")
            self._remaining -= size
        head = self._head
        self._head = None
        if self.head_only:
            if head is not None:
                transport.write(head)
        elif self._chunked:
            frame = b"%x\r\n" % size
            if size < _JOIN_BELOW:
                transport.write(b"".join((head or b"", frame, data, chunk_end)))
            else:
                transport.writelines([head or b"", frame, data, chunk_end])
        elif head is not None:
            if size < _JOIN_BELOW:
                transport.write(head + data)
            else:
                transport.writelines([head, data])
        else:
            transport.write(data)

    def send(self, response: Response) -> None:
        """A whole response in one write."""
        self.start(response.status, response.all_headers(), content_length=len(response.body))
        head = self._head or b""
        self._head = None
        self._remaining = 0
        self.body_bytes = len(response.body)
        self._transport().write(head if self.head_only else head + response.body)
        self.finished = True
        self._channel.response_finished(self.keep_alive)

    def send_error(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        self.send(error_response(status, message, param=param, code=code))

    def abort(self) -> None:
        """Cut the connection: a half-sent response must not look complete to the client."""
        self.finished = True
        self.keep_alive = False
        transport = self._channel.transport
        if transport is not None:
            transport.abort()
