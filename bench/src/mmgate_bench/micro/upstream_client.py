"""Micro-benchmark of the gateway's upstream HTTP client: mmgate's h1 pool vs aiohttp.ClientSession.

Both clients send the same small chat request to the same keep-alive loopback server (a bare
asyncio protocol in its own process, so its CPU is not counted) from C concurrent tasks, in
interleaved rounds so machine drift hits both alike. Reported per client: requests/s and the
client process's CPU per request (user and system), medians over the rounds. A bare protocol
(write the request, count the reply's bytes) is the floor: the loop, the syscalls and this
harness; the pool's own cost is what it adds above that.

    mmgate bench upstream-client [--seconds 2] [--rounds 3] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import uvloop

from mmgate.http.client import UpstreamPool
from mmgate_bench.procstat import own_cpu_seconds
from mmgate_bench.results import write_json
from mmgate_bench.stats import median

BODY = json.dumps(
    {
        "model": "null-model",
        "messages": [{"role": "user", "content": "Say hello to the benchmark in a few words, please."}],
        "max_tokens": 16,
    }
).encode()
HEADERS = [("Content-Type", "application/json"), ("Authorization", "Bearer bench"), ("X-Request-Id", "r1")]
REPLY = (
    b'{"id":"cmpl-1","object":"chat.completion","model":"null-model","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}'
)
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ndate: Mon, 30 Nov 2026 14:00:00 GMT\r\n"
    b"server: bench\r\ncontent-length: %d\r\n\r\n" % len(REPLY) + REPLY
)

# -- the upstream: answers every request at once, in its own process ------------------------------


class _Responder(asyncio.Protocol):
    """Answers each complete request (head + Content-Length body) with RESPONSE."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        replies = 0
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            start = buffer.find(b"ontent-length: ", 0, end)
            length = int(buffer[start + 15 : buffer.find(b"\r\n", start)]) if start >= 0 else 0
            if len(buffer) < end + 4 + length:
                break
            del buffer[: end + 4 + length]
            replies += 1
        if replies and self.transport is not None:
            self.transport.write(RESPONSE * replies)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Responder, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


# -- the clients -----------------------------------------------------------------------------------

Send = Callable[[], Awaitable[int]]


async def _h1_client(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    pool = UpstreamPool(connect_timeout_s=5, read_timeout_s=30)

    async def send() -> int:
        response = await pool.request("127.0.0.1", port, "POST", "/v1/chat/completions", HEADERS, BODY)
        size = 0
        while piece := await response.read():
            size += len(piece)
        response.release()
        return size

    return send, pool.close


async def _aiohttp_client(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), skip_auto_headers=("User-Agent", "Accept-Encoding")
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    headers = dict(HEADERS)

    async def send() -> int:
        async with session.post(url, data=BODY, headers=headers) as response:
            return len(await response.read())

    return send, session.close


class _Bare(asyncio.Protocol):
    """The floor: a fixed request out, wait for RESPONSE's byte count, no parsing or pooling logic."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[int] | None = None
        self.got = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= len(RESPONSE) and self.waiter is not None:
            self.waiter.set_result(len(REPLY))

    async def send(self, request: bytes) -> int:
        assert self.transport is not None
        self.got = 0
        self.waiter = self.loop.create_future()
        self.transport.write(request)
        return await self.waiter


async def _bare_client(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    loop = asyncio.get_running_loop()
    head = "".join(f"{name}: {value}\r\n" for name, value in HEADERS)
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    idle: list[_Bare] = []

    async def send() -> int:
        if idle:
            conn = idle.pop()
        else:
            _, conn = await loop.create_connection(lambda: _Bare(loop), "127.0.0.1", port)
        size = await conn.send(request)
        idle.append(conn)
        return size

    async def close() -> None:
        for conn in idle:
            assert conn.transport is not None
            conn.transport.close()

    return send, close


CLIENTS = {
    "bare protocol (floor)": _bare_client,
    "mmgate h1 pool": _h1_client,
    "aiohttp ClientSession": _aiohttp_client,
}


async def _round(send: Send, concurrency: int, seconds: float) -> dict[str, float]:
    stop = time.monotonic() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < stop:
            if await send() != len(REPLY):
                raise RuntimeError("short reply")
            done += 1

    for _ in range(concurrency):  # warm the connections up
        await send()
    user0, sys0 = own_cpu_seconds()
    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.monotonic() - started
    user1, sys1 = own_cpu_seconds()
    return {
        "requests": done,
        "rps": done / wall,
        "cpu_us": (user1 - user0 + sys1 - sys0) / done * 1e6,
        "user_us": (user1 - user0) / done * 1e6,
        "sys_us": (sys1 - sys0) / done * 1e6,
    }


async def _bench(port: int, args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {name: [] for name in CLIENTS}
    for _ in range(args.rounds):
        for name, make in CLIENTS.items():
            send, close = await make(port)
            try:
                results[name].append(await _round(send, args.concurrency, args.seconds))
            finally:
                await close()
    return results


def _table(results: dict[str, list[dict[str, float]]]) -> list[str]:
    lines = [f"{'client':<24}{'req/s':>10}{'CPU µs/req':>12}{'user':>8}{'sys':>8}"]
    medians = {
        name: {key: median(r[key] for r in rounds) for key in rounds[0]} for name, rounds in results.items()
    }
    for name, m in medians.items():
        lines.append(
            f"{name:<24}{m['rps']:>10,.0f}{m['cpu_us']:>12.1f}{m['user_us']:>8.1f}{m['sys_us']:>8.1f}"
        )
    ours, theirs = medians["mmgate h1 pool"], medians["aiohttp ClientSession"]
    floor = medians["bare protocol (floor)"]
    lines.append(
        f"h1/aiohttp: req/s {ours['rps'] / theirs['rps']:.2f}x, "
        f"CPU per request {ours['cpu_us'] / theirs['cpu_us']:.2f}x; "
        f"h1 above the floor: {ours['cpu_us'] - floor['cpu_us']:.1f} µs CPU "
        f"({ours['user_us'] - floor['user_us']:.1f} µs user) per request"
    )
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one round per client")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per client (median)")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="client event loop")
    parser.add_argument("--out", type=Path, help="write the raw rounds as JSON here")


def run(args: argparse.Namespace) -> int:
    server = subprocess.Popen(
        [sys.executable, "-m", "mmgate_bench.micro.upstream_client"],  # the server process, below
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        run = uvloop.run if args.loop == "uvloop" else asyncio.run
        results = run(_bench(port, args))
    finally:
        server.terminate()
        server.wait()
    print(
        f"{args.rounds} interleaved rounds of {args.seconds:g}s, {args.concurrency} in flight, "
        f"client on {args.loop}, {len(BODY)} B request, {len(RESPONSE)} B response"
    )
    print("\n".join(_table(results)))
    if args.out:
        write_json(args.out, {"args": vars(args) | {"out": str(args.out)}, "rounds": results})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # the loopback server the benchmark starts in its own process
    uvloop.run(_serve())
