"""A loopback TCP server that plays raw HTTP/1.1 bytes scripted by each test.

The upstream client must be tested against exactly the bytes a real server might send (odd
framings, resets, silences), so each test writes the server side as a small coroutine.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from mmgate.http.client import Body, UpstreamPool, UpstreamResponse


@dataclass
class Peer:
    """The server side of one accepted connection."""

    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def read_request(self) -> tuple[bytes, bytes]:
        """One request: its head (up to the blank line) and its Content-Length body."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length) if length else b""
        return head, body

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0) instead of a FIN."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def at_eof(self, timeout: float = 2.0) -> bool:
        """True once the client closed its side (FIN or RST) within ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if not await self.reader.read(65536):
                        return True
        except ConnectionError:
            return True
        except TimeoutError:
            return False


Handler = Callable[[Peer], Awaitable[None]]


@dataclass
class Server:
    port: int
    peers: list[Peer] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return len(self.peers)


@asynccontextmanager
async def raw_server(handler: Handler, *, receive_buffer: int = 0) -> AsyncIterator[Server]:
    """Serve ``handler`` once per accepted connection on an ephemeral loopback port.

    ``receive_buffer`` fixes SO_RCVBUF (no autotuning), so a slow reader really slows the sender.
    """
    tasks: set[asyncio.Task[None]] = set()
    server: Server | None = None

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert server is not None
        peer = Peer(len(server.peers), reader, writer)
        server.peers.append(peer)
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(peer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the test is over (cancelled below)
        finally:
            tasks.discard(task)

    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.bind(("127.0.0.1", 0))
    listener = await asyncio.start_server(accept, sock=sock)
    server = Server(listener.sockets[0].getsockname()[1])
    try:
        yield server
    finally:
        for task in list(tasks):
            task.cancel()
        for peer in server.peers:
            peer.writer.transport.abort()
        listener.close()
        await listener.wait_closed()


def ok(body: bytes, *extra: str) -> bytes:
    """A Content-Length response with optional extra header lines."""
    lines = "".join(f"{line}\r\n" for line in extra)
    return b"HTTP/1.1 200 OK\r\n" + lines.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


def make_pool(**overrides: float) -> UpstreamPool:
    settings: dict[str, float] = {"connect_timeout_s": 1.0, "read_timeout_s": 2.0, **overrides}
    max_idle = int(settings.pop("max_idle_per_origin", 256))
    return UpstreamPool(
        connect_timeout_s=settings["connect_timeout_s"],
        read_timeout_s=settings["read_timeout_s"],
        max_idle_per_origin=max_idle,
        idle_timeout_s=settings.get("idle_timeout_s", 60.0),
    )


async def read_all(response: UpstreamResponse) -> bytes:
    parts = []
    while piece := await response.read():
        parts.append(piece)
    return b"".join(parts)


async def fetch(pool: UpstreamPool, server: Server, method: str = "GET", body: Body = b"") -> bytes:
    """One whole exchange: request, read the body to the end, release the connection."""
    response = await pool.request("127.0.0.1", server.port, method, "/", [], body)
    data = await read_all(response)
    response.release()
    return data
