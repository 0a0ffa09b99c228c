"""Memory of many concurrent idle streams: what one open-but-silent SSE stream costs the gateway.

Starts a held upstream (each completion sends one SSE event, then nothing until released), one
``mmgate serve`` process in front of it, and opens ``--streams`` streaming requests through the
gateway that all stay open. The gateway's RSS is read from /proc before and with every stream
open, then all are released and must complete. Run as
``mmgate bench idle-streams --streams 9000``; the reliability suite runs it with a few
hundred. Each stream needs two sockets in the gateway (client and upstream), so N streams need
``ulimit -n`` above 2N.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from mmgate_bench.processes import free_port
from mmgate_bench.procstat import rss_mb
from mmgate_bench.results import write_json

MODEL = "idle"
FIRST = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
LAST = b"data: [DONE]\n\n"


@dataclass(slots=True)
class IdleResult:
    streams: int
    opened: int
    completed: int
    rss_before_mb: float
    rss_open_mb: float
    rss_after_mb: float
    kb_per_stream: float
    open_seconds: float


class HeldUpstream:
    """A model-server stand-in whose streams stay open until :meth:`release`."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.open = 0
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def completion(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST)
        self.open += 1
        try:
            await self.released.wait()
            with contextlib.suppress(ConnectionError):  # the warm-up clients leave early
                await resp.write(LAST)
                await resp.write_eof()
        finally:
            self.open -= 1
        return resp

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(text=f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 0\n')

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completion)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def _ready(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url + "/ready") as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError("gateway did not become ready")


async def measure(streams: int, command: list[str], env: dict[str, str] | None = None) -> IdleResult:
    """Open ``streams`` idle streams through a gateway started with ``command`` (``mmgate`` argv
    prefix); ``--endpoints`` and ``--port`` are appended, and a config whose upstream pool has
    room for every stream (``mmgate.upstreamPoolLimit``; beyond it requests wait for a connection)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    upstream = HeldUpstream()
    await upstream.start()
    port = free_port()
    folder = tempfile.TemporaryDirectory()
    config = Path(folder.name) / "idle.yaml"
    config.write_text(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        f"mmgate:\n  upstreamPoolLimit: {streams + 64}\n"
    )
    proc = await asyncio.create_subprocess_exec(
        *command, "serve", "--config", str(config), "--endpoints", f"127.0.0.1:{upstream.port}",
        "--port", str(port),
        "--no-access-log", "--log-level", "warning",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True})
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    opened = completed = 0
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as s:
            await _ready(s, url)
            for _ in range(20):  # warm up: pools, code paths, first allocations
                async with s.post(url + "/v1/chat/completions", data=body) as resp:
                    await resp.content.readany()
            upstream.released.set()
            while upstream.open:
                await asyncio.sleep(0.05)
            upstream.released.clear()
            await asyncio.sleep(0.5)
            before = rss_mb([proc.pid or 0])
            started = time.monotonic()
            responses: list[aiohttp.ClientResponse] = []

            async def open_one() -> None:
                resp = await s.post(url + "/v1/chat/completions", data=body)
                first = await resp.content.readany()
                assert resp.status == 200 and first, (resp.status, first)
                responses.append(resp)

            batch = 200
            for i in range(0, streams, batch):
                async with asyncio.timeout(60):
                    await asyncio.gather(*(open_one() for _ in range(min(batch, streams - i))))
            opened = len(responses)
            open_seconds = time.monotonic() - started
            await asyncio.sleep(1.0)
            during = rss_mb([proc.pid or 0])
            upstream.released.set()

            async def finish(resp: aiohttp.ClientResponse) -> bool:
                rest = await resp.read()
                resp.release()
                return rest.endswith(LAST)

            completed = sum(await asyncio.gather(*(finish(r) for r in responses)))
            await asyncio.sleep(0.5)
            after = rss_mb([proc.pid or 0])
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await upstream.stop()
        folder.cleanup()
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return IdleResult(
        streams=streams,
        opened=opened,
        completed=completed,
        rss_before_mb=round(before, 1),
        rss_open_mb=round(during, 1),
        rss_after_mb=round(after, 1),
        kb_per_stream=round((during - before) * 1024 / max(1, opened), 1),
        open_seconds=round(open_seconds, 2),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument(
        "--streams", type=int, default=10_000, help="idle streams to hold open (default 10000)"
    )
    parser.add_argument("--out", help="write the result as JSON here")


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(measure(args.streams, [sys.executable, "-m", "mmgate"]))
    print(orjson.dumps(asdict(result), option=orjson.OPT_INDENT_2).decode())
    if args.out:
        write_json(args.out, asdict(result))
    return 0 if result.completed == result.opened == result.streams else 1
