"""The overhead benchmark's load client, run as its own process.

It must not share an event loop (or a GIL) with what it measures, and it must be cheap: it sends
pre-built request bytes over keep-alive connections with minimal HTTP framing
(:mod:`mmgate_bench.overhead.framing`) on uvloop. The harness starts it once and sends it jobs, one
JSON object per line on stdin; it answers each with one JSON line on stdout, so bodies of
megabytes are loaded once and no process start-up lands inside a measurement.

Two load shapes:

- ``closed``: ``concurrency`` connections, each sending its next request as soon as the last one
  finished, for ``duration`` seconds or ``requests`` requests. Its throughput at saturation is the
  system's maximum sustained rate; at concurrency 1 its latencies are the unloaded latency.
- ``open``: arrivals at a fixed ``rate`` regardless of completions (a connection is opened when no
  idle one is free, up to ``max_conns``). Latency counts from the scheduled arrival, so a system
  that falls behind shows it (no coordinated omission).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmgate_bench.overhead.framing import ProtocolError, iter_body, read_head, status_of
from mmgate_bench.overhead.nullserver import run_fast

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(slots=True)
class Job:
    port: int
    body_file: str
    host: str = "127.0.0.1"
    path: str = "/v1/chat/completions"
    mode: str = "closed"
    concurrency: int = 1
    duration: float = 2.0
    requests: int = 0
    """Stop after this many requests (0: only the duration bounds a closed run)."""
    rate: float = 0.0
    max_conns: int = 256
    timeout: float = 30.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(slots=True)
class Outcome:
    latencies_ms: list[float] = field(default_factory=list)
    ttfb_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    bytes_in: int = 0

    def as_dict(self, elapsed: float) -> dict[str, Any]:
        return {
            "ok": len(self.latencies_ms),
            "errors": sum(self.errors.values()),
            "error_kinds": dict(self.errors),
            "elapsed_s": elapsed,
            "latencies_ms": [round(v, 4) for v in self.latencies_ms],
            "ttfb_ms": [round(v, 4) for v in self.ttfb_ms],
            "bytes_in": self.bytes_in,
        }


class Client:
    """Runs jobs; keeps request bodies in memory between jobs."""

    def __init__(self) -> None:
        self._bodies: dict[str, bytes] = {}

    def _request_bytes(self, job: Job) -> bytes:
        body = self._bodies.get(job.body_file)
        if body is None:
            body = self._bodies[job.body_file] = Path(job.body_file).read_bytes()
        head = (
            f"POST {job.path} HTTP/1.1\r\nHost: {job.host}:{job.port}\r\n"
            f"Content-Type: application/json\r\nAccept: */*\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        return head + body

    async def run(self, job: Job) -> dict[str, Any]:
        request = self._request_bytes(job)
        outcome = Outcome()
        started = time.perf_counter()
        if job.mode == "closed":
            await self._closed(job, request, outcome)
        elif job.mode == "open":
            await self._open(job, request, outcome)
        else:
            raise ValueError(f"unknown mode {job.mode!r}")
        return outcome.as_dict(time.perf_counter() - started)

    async def _closed(self, job: Job, request: bytes, outcome: Outcome) -> None:
        deadline = time.perf_counter() + job.duration
        budget = [job.requests or -1]

        async def worker() -> None:
            conn: Connection | None = None
            while time.perf_counter() < deadline and budget[0] != 0:
                budget[0] -= 1
                if conn is None:
                    conn = await _connect(job, outcome)
                    if conn is None:
                        await asyncio.sleep(0.01)
                        continue
                ok = await _exchange(conn, request, time.perf_counter(), job.timeout, outcome)
                if not ok:
                    _close(conn)
                    conn = None
            if conn is not None:
                _close(conn)

        await asyncio.gather(*(worker() for _ in range(job.concurrency)))

    async def _open(self, job: Job, request: bytes, outcome: Outcome) -> None:
        idle: list[Connection] = []
        opened = 0
        freed = asyncio.Condition()

        async def one(scheduled: float) -> None:
            nonlocal opened
            conn: Connection | None = None
            async with freed:
                while not idle and opened >= job.max_conns:
                    await freed.wait()
                if idle:
                    conn = idle.pop()
                else:
                    opened += 1
            if conn is None:
                conn = await _connect(job, outcome)
            ok = conn is not None and await _exchange(conn, request, scheduled, job.timeout, outcome)
            async with freed:
                if ok and conn is not None:
                    idle.append(conn)
                else:
                    if conn is not None:
                        _close(conn)
                    opened -= 1
                freed.notify()

        total = max(1, round(job.rate * job.duration))
        start = time.perf_counter()
        tasks: list[asyncio.Task[None]] = []
        for index in range(total):
            scheduled = start + index / job.rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(scheduled)))
        _done, pending = await asyncio.wait(tasks, timeout=job.timeout)
        for task in pending:
            task.cancel()
            outcome.errors["unfinished"] += 1
        await asyncio.gather(*pending, return_exceptions=True)
        for conn in idle:
            _close(conn)


async def _connect(job: Job, outcome: Outcome) -> Connection | None:
    try:
        return await asyncio.open_connection(job.host, job.port, limit=1 << 20)
    except OSError as exc:
        outcome.errors[f"connect: {type(exc).__name__}"] += 1
        return None


async def _exchange(conn: Connection, request: bytes, t0: float, timeout: float, outcome: Outcome) -> bool:
    """Send one request and read its response; record the latency from ``t0``. False = drop conn."""
    reader, writer = conn
    try:
        async with asyncio.timeout(timeout):
            writer.write(request)
            start_line, headers = await read_head(reader)
            status = status_of(start_line)
            first: float | None = None
            size = 0
            closing = headers.get(b"connection", b"").lower() == b"close"
            async for piece in iter_body(reader, headers, until_eof=closing):
                if first is None:
                    first = time.perf_counter()
                size += len(piece)
    except TimeoutError:
        outcome.errors["timeout"] += 1
        return False
    except (OSError, asyncio.IncompleteReadError, ProtocolError, ValueError) as exc:
        outcome.errors[type(exc).__name__] += 1
        return False
    end = time.perf_counter()
    outcome.bytes_in += size
    if status != 200:
        outcome.errors[f"http {status}"] += 1
        return headers.get(b"connection", b"").lower() != b"close"
    outcome.latencies_ms.append((end - t0) * 1000)
    outcome.ttfb_ms.append(((first or end) - t0) * 1000)
    return headers.get(b"connection", b"").lower() != b"close"


def _close(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        conn[1].close()


async def _serve_stdin() -> None:
    client = Client()
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if not line.strip():
            continue
        try:
            result = await client.run(Job.from_dict(json.loads(line)))
        except Exception as exc:  # report, keep serving: one bad job must not kill the run
            result = {"fatal": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The overhead benchmark's load client: reads one JSON job per line on stdin (fields of Job: "
        "port, body_file, host, path, mode closed|open, concurrency, duration, requests, rate, "
        "max_conns, timeout) and answers one JSON result per line."
    )


def run(args: argparse.Namespace) -> int:
    """``mmgate bench load-client``: serve jobs from stdin until it closes."""
    run_fast(_serve_stdin())
    return 0


if __name__ == "__main__":  # the process the overhead harness starts
    sys.exit(run(argparse.Namespace()))
