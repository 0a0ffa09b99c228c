"""A null OpenAI-compatible upstream: answers after a fixed small delay and does no work.

The overhead benchmark puts it behind every router under test, so that whatever latency and CPU a
request costs on top of "direct to the null server" is the router's. It speaks what a router
expects of a vLLM server: ``POST /v1/chat/completions`` and ``/v1/completions`` (streaming as
server-sent events with N token chunks, or one JSON body), ``GET /v1/models``, ``/health`` and a
vLLM-format ``/metrics`` page (so a gateway's scraper sees a healthy, idle-ish endpoint).

One process can listen on several ports, each acting as a separate "worker", so a router has a
real choice to make while the upstream costs one process. It is a bare asyncio protocol, not an
HTTP framework: body bytes are counted as they arrive and dropped (a router must really deliver
its megabytes, but the upstream should not spend CPU on them), and only bodies under
``PARSE_LIMIT`` are kept and parsed, for ``stream`` and ``max_tokens``. The benchmark's bodies
are either small text or multi-megabyte images, and only text requests stream.

Run it alone with ``mmgate bench null-server --port 8000 --port 8001``; it prints one
JSON line with the bound ports, then serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import orjson

from mmgate_bench.overhead.framing import HEAD_END, LAST_CHUNK, MAX_HEAD, ProtocolError, chunk

PARSE_LIMIT = 64 * 1024
"""Bodies larger than this are not parsed (they carry images; the benchmark never streams them)."""


@dataclass(slots=True)
class NullConfig:
    model: str = "null-model"
    latency_s: float = 0.001
    """Delay before the (first byte of the) answer: a stand-in for prefill."""
    tokens: int = 16
    """Completion tokens when the request does not ask for ``max_tokens``."""
    itl_s: float = 0.0
    """Delay between streamed tokens (0: all chunks written back to back)."""


@dataclass(slots=True)
class PortStats:
    running: int = 0
    served: int = 0
    prompt_bytes: int = 0


@dataclass(slots=True)
class Request:
    method: bytes
    path: bytes
    body: bytes | None
    """The body when it was small enough to keep (``PARSE_LIMIT``), else ``None``."""
    size: int
    close: bool


class _Connection(asyncio.Protocol):
    """One client connection: an incremental HTTP/1.1 request parser and an in-order responder.

    Body bytes beyond ``PARSE_LIMIT`` are counted and dropped as they arrive, never buffered or
    copied, so a 2.3 MB request costs the upstream little more than the kernel's copy.
    """

    def __init__(self, server: NullServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.stats = PortStats()
        self.pending: asyncio.Queue[Request | None] = asyncio.Queue()
        self.buf = bytearray()
        self.state = _HEAD
        self.remaining = 0  # body (or chunk + CRLF) bytes still to come
        self.keep: bytearray | None = None
        self.size = 0
        self.head: tuple[bytes, bytes, bool] = (b"", b"", False)
        self.worker: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.stats = self.server.stats[transport.get_extra_info("sockname")[1]]
        self.worker = asyncio.get_running_loop().create_task(self._respond_in_order())

    def connection_lost(self, exc: Exception | None) -> None:
        self.pending.put_nowait(None)

    def data_received(self, data: bytes) -> None:
        if self.buf:
            data = bytes(self.buf) + data
            self.buf.clear()
        pos, end = 0, len(data)
        try:
            while pos < end:
                if self.remaining:
                    take = min(self.remaining, end - pos)
                    if self.keep is not None:
                        self.keep += data[pos : pos + take]
                    pos += take
                    self.remaining -= take
                    if not self.remaining:
                        self._body_piece_done()
                    continue
                sep = HEAD_END if self.state == _HEAD else b"\r\n"
                found = data.find(sep, pos)
                if found < 0:
                    self.buf += data[pos:]
                    if len(self.buf) > MAX_HEAD:
                        raise ProtocolError("head too large")
                    return
                self._line(data[pos:found])
                pos = found + len(sep)
        except (ProtocolError, ValueError):
            if self.transport is not None:
                self.transport.close()

    def _line(self, line: bytes) -> None:
        if self.state == _HEAD:
            self._start(line)
        elif self.state == _CHUNK_SIZE:
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size:
                self.remaining, self.size = size + 2, self.size + size
                if self.keep is not None and self.size > PARSE_LIMIT:
                    self.keep = None
            else:
                self.state = _TRAILER
        elif not line:  # the empty line after the (absent) trailers
            self._finish()

    def _start(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        method, _, rest = lines[0].partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolError("malformed header")
            headers[name.strip().lower()] = value.strip()
        self.head = (method, path, headers.get(b"connection", b"").lower() == b"close")
        self.keep, self.size = bytearray(), 0
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self.state = _CHUNK_SIZE
            return
        self.size = int(headers.get(b"content-length", b"0"))
        if self.size > PARSE_LIMIT:
            self.keep = None
        self.state, self.remaining = _BODY, self.size
        if not self.size:
            self._finish()

    def _body_piece_done(self) -> None:
        if self.state == _BODY:
            self._finish()
            return
        if self.keep is not None:
            del self.keep[-2:]  # the CRLF after the chunk
        self.state = _CHUNK_SIZE

    def _finish(self) -> None:
        method, path, close = self.head
        body = bytes(self.keep) if self.keep is not None else None
        self.pending.put_nowait(Request(method, path, body, self.size, close))
        self.state, self.remaining, self.keep = _HEAD, 0, None

    async def _respond_in_order(self) -> None:
        while (request := await self.pending.get()) is not None:
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            await self.server.answer(request, transport, self.stats)
            if request.close:
                transport.close()
                return


_HEAD, _BODY, _CHUNK_SIZE, _TRAILER = range(4)


@dataclass(slots=True)
class NullServer:
    config: NullConfig
    stats: dict[int, PortStats] = field(default_factory=dict)
    servers: list[asyncio.Server] = field(default_factory=list)
    events: dict[bool, tuple[bytes, bytes]] = field(default_factory=dict)

    async def start(self, ports: Sequence[int], host: str = "127.0.0.1") -> list[int]:
        """Listen on every port (0 = ephemeral) and return the bound ports, in order."""
        loop = asyncio.get_running_loop()
        bound: list[int] = []
        for port in ports:
            server = await loop.create_server(lambda: _Connection(self), host, port, backlog=1024)
            actual = server.sockets[0].getsockname()[1]
            self.stats[actual] = PortStats()
            self.servers.append(server)
            bound.append(actual)
        return bound

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for server in self.servers:
            await server.wait_closed()

    def _events(self, chat: bool) -> tuple[bytes, bytes]:
        """The (middle, last) token events, serialised once: the upstream should cost nothing."""
        events = self.events.get(chat)
        if events is None:
            model = self.config.model
            events = self.events[chat] = (
                _event(model, chat=chat, final=False),
                _event(model, chat=chat, final=True),
            )
        return events

    async def answer(self, request: Request, writer: asyncio.Transport, stats: PortStats) -> None:
        if request.method == b"POST" and request.path in (b"/v1/chat/completions", b"/v1/completions"):
            chat = request.path.endswith(b"chat/completions")
            await self._complete(writer, stats, request.body, request.size, chat=chat)
        elif request.method == b"GET":
            self._get(writer, stats, request.path)
        else:
            _respond(writer, 404, b'{"error":{"message":"not found","type":"not_found"}}')

    def _get(self, writer: asyncio.Transport, stats: PortStats, path: bytes) -> None:
        if path in (b"/health", b"/ready", b"/ping"):
            _respond(writer, 200, b"", content_type=b"text/plain")
        elif path == b"/v1/models":
            models = {
                "object": "list",
                "data": [{"id": self.config.model, "object": "model", "created": 0, "owned_by": "null"}],
            }
            _respond(writer, 200, orjson.dumps(models))
        elif path == b"/metrics":
            _respond(writer, 200, self._metrics(stats), content_type=b"text/plain; version=0.0.4")
        else:
            _respond(writer, 404, b'{"error":{"message":"not found","type":"not_found"}}')

    def _metrics(self, stats: PortStats) -> bytes:
        label = f'model_name="{self.config.model}"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{label}}} {stats.running}.0",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{label}}} 0.0",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{label}}} {min(1.0, stats.running / 256):.4f}",
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="65536",{label}}} 1.0',
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="length",{label}}} {stats.served}.0',
        ]
        return ("\n".join(lines) + "\n").encode()

    async def _complete(
        self, writer: asyncio.Transport, stats: PortStats, body: bytes | None, size: int, *, chat: bool
    ) -> None:
        stream, tokens = False, self.config.tokens
        if body is not None:
            with contextlib.suppress(orjson.JSONDecodeError, TypeError, ValueError):
                parsed = orjson.loads(body)
                if isinstance(parsed, dict):
                    stream = parsed.get("stream") is True
                    asked = parsed.get("max_tokens") or parsed.get("max_completion_tokens")
                    if isinstance(asked, int) and asked > 0:
                        tokens = asked
        stats.running += 1
        stats.prompt_bytes += size
        try:
            if self.config.latency_s > 0:
                await asyncio.sleep(self.config.latency_s)
            if stream:
                await self._stream(writer, tokens, chat=chat)
            else:
                _respond(writer, 200, _completion(self.config.model, tokens, size, chat=chat))
        finally:
            stats.running -= 1
            stats.served += 1

    async def _stream(self, writer: asyncio.Transport, tokens: int, *, chat: bool) -> None:
        """One write per token (each its own TCP segment: routers relay them one by one)."""
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        middle, last = self._events(chat)
        for index in range(tokens):
            writer.write(last if index == tokens - 1 else middle)
            if self.config.itl_s > 0:
                await asyncio.sleep(self.config.itl_s)
        writer.write(chunk(b"data: [DONE]\n\n") + LAST_CHUNK)


def _event(model: str, *, chat: bool, final: bool) -> bytes:
    """One server-sent event of a streamed answer, framed as a chunk."""
    choice: dict[str, object] = {"index": 0, "finish_reason": "length" if final else None}
    if chat:
        choice["delta"] = {"content": " tok"}
    else:
        choice["text"] = " tok"
    event = {
        "id": "null-0",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    return chunk(b"data: " + orjson.dumps(event) + b"\n\n")


def _completion(model: str, tokens: int, prompt_bytes: int, *, chat: bool) -> bytes:
    text = " tok" * tokens
    usage = {"prompt_tokens": max(1, prompt_bytes // 4), "completion_tokens": tokens}
    usage["total_tokens"] = usage["prompt_tokens"] + tokens
    choice: dict[str, object] = {"index": 0, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    answer = {
        "id": "null-0",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
    return orjson.dumps(answer)


def _respond(
    writer: asyncio.Transport, status: int, body: bytes, *, content_type: bytes = b"application/json"
) -> None:
    reason = b"OK" if status == 200 else b"Not Found"
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
        % (status, reason, content_type, len(body), body)
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        action="append",
        help="port to listen on; repeat for more workers (default: one, ephemeral)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="null-model", help="model name served (default: %(default)s)")
    parser.add_argument(
        "--latency-ms", type=float, default=1.0, help="delay before answering (default: %(default)s)"
    )
    parser.add_argument("--tokens", type=int, default=16, help="completion tokens when max_tokens is absent")
    parser.add_argument(
        "--itl-ms", type=float, default=0.0, help="delay between streamed tokens (default: 0)"
    )


async def serve(args: argparse.Namespace) -> None:
    config = NullConfig(
        model=args.model, latency_s=args.latency_ms / 1000, tokens=args.tokens, itl_s=args.itl_ms / 1000
    )
    server = NullServer(config)
    ports = await server.start(args.port or [0], host=args.host)
    print(json.dumps({"ports": ports, "host": args.host}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()


def run(args: argparse.Namespace) -> int:
    """``mmgate bench null-server``: serve until SIGINT or SIGTERM."""
    run_fast(serve(args))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The process the overhead harness starts (``python -m mmgate_bench.overhead.nullserver``)."""
    parser = argparse.ArgumentParser(prog="mmgate bench null-server")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run_fast(coro: object) -> None:
    """Run a coroutine on uvloop where available (the benchmark's ends should be cheap)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(coro)  # type: ignore[arg-type]
        return
    uvloop.run(coro)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
