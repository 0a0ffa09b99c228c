"""Just enough HTTP/1.1 framing for the overhead benchmark's null upstream and load client.

Both ends of the overhead benchmark must cost as little CPU as possible: on a 2-core machine the
client, the upstream and the router under test share the cores, and every cycle the harness burns
is a cycle the router cannot use. A full HTTP stack (aiohttp) spends most of its time on things
this traffic never needs (routing tables, header objects, middlewares), so the two ends speak
HTTP/1.1 over plain asyncio streams: one head, then a body framed by ``Content-Length`` or
``Transfer-Encoding: chunked`` (what routers send when they stream a body on), keep-alive always.
This is not a general HTTP implementation and nothing outside the benchmark should use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

HEAD_END = b"\r\n\r\n"
MAX_HEAD = 64 * 1024


class ProtocolError(Exception):
    """The peer sent something this minimal framing does not understand."""


async def read_head(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes]]:
    """The start line and the headers (names lower-cased) of the next message.

    Raises ``asyncio.IncompleteReadError`` when the peer closed the connection between messages.
    """
    try:
        raw = await reader.readuntil(HEAD_END)
    except asyncio.LimitOverrunError as exc:
        raise ProtocolError("message head too large") from exc
    lines = raw[:-4].split(b"\r\n")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolError(f"malformed header line {line[:60]!r}")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def is_chunked(headers: dict[bytes, bytes]) -> bool:
    return b"chunked" in headers.get(b"transfer-encoding", b"").lower()


async def iter_body(
    reader: asyncio.StreamReader, headers: dict[bytes, bytes], *, until_eof: bool = False
) -> AsyncIterator[bytes]:
    """Yield the body as it arrives (one piece per chunk for chunked bodies).

    ``until_eof`` is for responses without a length (the body ends when the server closes).
    """
    if is_chunked(headers):
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                # Trailers (none expected) end with an empty line.
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
    elif (length := headers.get(b"content-length")) is not None:
        remaining = int(length)
        while remaining > 0:
            data = await reader.read(min(remaining, 1 << 20))
            if not data:
                raise asyncio.IncompleteReadError(b"", remaining)
            remaining -= len(data)
            yield data
    elif until_eof:
        while data := await reader.read(1 << 20):
            yield data


async def read_body(reader: asyncio.StreamReader, headers: dict[bytes, bytes]) -> bytes:
    """The whole request body (no length and not chunked means empty, as for a GET)."""
    length = headers.get(b"content-length")
    if length is not None and not is_chunked(headers):
        return await reader.readexactly(int(length))
    return b"".join([piece async for piece in iter_body(reader, headers)])


def status_of(start_line: bytes) -> int:
    """The status code of a response start line such as ``HTTP/1.1 200 OK``."""
    parts = start_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ProtocolError(f"not an HTTP response: {start_line[:60]!r}")
    return int(parts[1])


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
