"""``mmgate bench hotpath``: the gateway's per-request Python work, in-process, per stage.

No sockets and no event loop: a gateway is built from a config exactly as ``mmgate serve`` builds
it, given two endpoints that are never contacted, and the calls the gateway makes for one request
outside its HTTP layer (the request controller's steps) are timed in a loop. Stages are
cumulative, so each one's cost is the difference to the previous one and the last column is the
whole per-request bill:

  parse        request id + one parse of the body (skeleton decode, media probing, hashing)
  candidates   + the endpoints that serve the model
  decide       + circuit-breaker narrowing, the scheduler's decision (producers, filters, scorers,
                 picker, routing-header hooks), decision telemetry
  lifecycle    + upstream headers, started (load on every stage's pod, PreRequest index updates,
                 breaker probe) / first byte / finished, request metrics, the trace's end
  bookkeeping  + admission and retry budget (the in-flight gauge is read from the admission
                 slots at scrape time, so a request updates nothing for it)

The request controller's tracing seam is called as the HTTP gateway calls it: with tracing off
(the default) ``controller.trace`` returns ``None`` and nothing else happens; ``--tracing`` turns
it on, the spans going to a local OTLP/HTTP sink that answers every export with 200, so the cost
measured is the spans' creation and the SDK's export thread (its CPU counts with ``--cpu-time``).

Each stage runs ``--repeats`` times ``--iterations`` requests; the median per request is reported.
The module only uses the gateway's public objects. An older checkout is measured with its own
copy of this module (``PYTHONPATH=/other/checkout/src python -m mmgate_bench.hotpath`` before
the bench/ move); where
stage boundaries moved between versions, compare the last column (docs/benchmarks/hotpath.md).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import pstats
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec

from mmgate.config import load_config
from mmgate.config.schema import TracingSpec
from mmgate.control.admission import client_key
from mmgate.datalayer.endpoints import parse_endpoint
from mmgate.datalayer.metrics import MetricsSnapshot
from mmgate.gateway.app import build_gateway
from mmgate.gateway.server import Gateway
from mmgate.http.headers import request_id_from, upstream_headers, with_trace_context
from mmgate.request.view import Api
from mmgate_bench.cli import command_line
from mmgate_bench.overhead.bodies import BODIES as BODIES  # re-exported: hotpath_trees.py reads them here
from mmgate_bench.overhead.bodies import body as body
from mmgate_bench.results import write_json
from mmgate_bench.routing.systems import UnknownSystem, resolve
from mmgate_bench.stats import median

STAGE_HELP = {
    "parse": "request id + one parse of the body (skeleton decode, media probing, hashing)",
    "candidates": "+ the endpoints that serve the model",
    "decide": "+ breaker narrowing, the scheduler's decision and its header hooks, decision telemetry",
    "lifecycle": "+ upstream headers, started (load, index hooks, breaker)/first byte/finished, metrics, "
    "trace end",
    "bookkeeping": "+ admission and retry budget (the in-flight gauge is read at scrape time)",
}
STAGES = tuple(STAGE_HELP)
DEFAULT_CONFIGS = ("round-robin", "aggregated")
DEFAULT_BODIES = ("text", "image-3")
ENDPOINTS = ("127.0.0.1:9101", "127.0.0.1:9102")
SMALL_BODY = 100_000  # bodies below this get --iterations; larger ones a tenth (at least 20)


@dataclass(slots=True)
class Case:
    config: str
    body: str
    body_bytes: int
    iterations: int
    cumulative_us: dict[str, float]
    runs_us: dict[str, list[float]]

    def stage_us(self) -> dict[str, float]:
        """Each stage's own cost: its cumulative median minus the previous stage's."""
        out: dict[str, float] = {}
        previous = 0.0
        for stage in STAGES:
            out[stage] = self.cumulative_us[stage] - previous
            previous = self.cumulative_us[stage]
        return out


def build(config_name: str, tracing: str | None = None, sample_ratio: float = 1.0) -> Gateway:
    """A gateway for ``config_name`` (an example name or a YAML path) with two idle endpoints;
    ``tracing``: trace (``sample_ratio`` of the requests), exporting spans to this OTLP/HTTP URL."""
    config = load_config(resolve(config_name).config)  # type: ignore[arg-type]
    spec = TracingSpec(endpoint=tracing, sampleRatio=sample_ratio) if tracing is not None else None
    if tracing is not None:
        # Every span of a repeat is exported within it (see measure): none may be dropped for want
        # of queue room, as the SDK's default queue (2,048 spans) would in a loop this tight.
        os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "4000000")
    section = msgspec.structs.replace(
        config.mmgate, endpoints=[], endpointsFile=None, accessLog=False, tracing=spec
    )
    gateway = build_gateway(msgspec.structs.replace(config, mmgate=section))
    if gateway.tracing is not None:
        gateway.tracing.start()  # what Gateway.start does; the benchmark starts nothing else
    for text in ENDPOINTS:
        gateway.data.registry.add(parse_endpoint(text))
    return gateway


class _Sink(BaseHTTPRequestHandler):
    """Accepts every OTLP/HTTP export (an empty protobuf answer is a valid one)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def otlp_sink() -> ThreadingHTTPServer:
    """A loopback collector stand-in in a thread; ``server_address[1]`` is its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _run_now(coro: Coroutine[Any, Any, None]) -> None:
    """Drive a coroutine that never suspends (admission with a free slot) without a loop."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("admission suspended: the benchmark expects a free slot")


def request_loop(gateway: Gateway, data: bytes, stage: int) -> Callable[[int], None]:
    """``run(n)``: ``n`` requests through the first ``stage + 1`` stages."""
    headers: Mapping[str, str] = {
        "Content-Type": "application/json",
        "Host": "gateway",
        "Content-Length": str(len(data)),
        "Authorization": "Bearer sk-benchmark",
    }
    controller, telemetry = gateway.controller, gateway.telemetry
    # What Gateway.handle reads once: the steps a request of this config takes.
    traced, client_keyed = controller.tracing, controller.reads_client

    def run(n: int) -> None:
        for _ in range(n):
            request_id = request_id_from(headers)
            trace = controller.trace(headers, Api.CHAT, "/v1/chat/completions") if traced else None
            view = controller.parse(data, headers, Api.CHAT, trace)
            if stage < 1:
                continue
            client = client_key(headers, "127.0.0.1") if client_keyed else ""
            flight = controller.open(view, request_id, headers, client=client, trace=trace)
            if stage < 2:
                continue
            if stage >= 4 and not controller.admit_now(flight):
                _run_now(controller.admit(flight))
            attempt = controller.decide(flight)
            assert attempt is not None
            if stage >= 3:
                sent = upstream_headers(headers.items(), request_id)
                controller.started(attempt)
                if attempt.propagation:
                    with_trace_context(sent, attempt.propagation)
                controller.first_byte(attempt, 200)
                controller.finished(attempt, ok=True, sent=512)
                telemetry.request_done(view.model, "200", attempt.endpoint, 0.001, 0.001)
                if trace is not None:
                    trace.end("200")
            if stage >= 4:
                controller.leave(flight)

    return run


def _refresh_metrics(gateway: Gateway) -> None:
    """Give every endpoint a fresh, plausible scrape so load scorers read real numbers."""
    now = gateway.clock()
    for i, record in enumerate(gateway.data.registry.records()):
        record.metrics = MetricsSnapshot(
            engine="vllm", waiting=float(i), running=4.0, kv_usage=0.2 + 0.1 * i,
            block_size=16, num_gpu_blocks=10_000, scraped_at=now,
        )  # fmt: skip


def measure(
    config: str,
    body_name: str,
    iterations: int,
    repeats: int,
    *,
    cpu_time: bool = False,
    tracing: str | None = None,
    sample_ratio: float = 1.0,
) -> Case:
    """``cpu_time``: time this process's CPU (``time.process_time``) instead of wall time, so a
    shared, loaded machine's descheduling does not count (cache and core sharing still do).
    ``tracing``: trace requests, exporting to this OTLP/HTTP URL; each repeat's timing includes
    the export of its spans (flushed before the clock stops)."""
    clock = time.process_time if cpu_time else time.perf_counter
    gateway = build(config, tracing, sample_ratio)
    flush = gateway.tracing.flush if gateway.tracing is not None else None
    data = body(BODIES[body_name])
    n = iterations if len(data) < SMALL_BODY else max(20, iterations // 10)
    cumulative: dict[str, float] = {}
    runs: dict[str, list[float]] = {}
    for index, stage in enumerate(STAGES):
        run = request_loop(gateway, data, index)
        _refresh_metrics(gateway)
        run(max(1, n // 10))  # warm caches, interned labels, lazily built tables
        samples = []
        for _ in range(repeats):
            _refresh_metrics(gateway)
            gc.collect()
            start = clock()
            run(n)
            if flush is not None:
                flush()
            samples.append((clock() - start) / n * 1e6)
        runs[stage] = [round(s, 2) for s in samples]
        cumulative[stage] = round(median(samples), 2)
    if gateway.tracing is not None:
        gateway.tracing.shutdown()
    return Case(config, body_name, len(data), n, cumulative, runs)


def profile(config: str, body_name: str, iterations: int, top: int) -> None:
    """cProfile of the whole per-request path, the ``top`` functions by own time."""
    gateway = build(config)
    data = body(BODIES[body_name])
    run = request_loop(gateway, data, len(STAGES) - 1)
    _refresh_metrics(gateway)
    run(10)
    profiler = cProfile.Profile()
    profiler.runcall(run, iterations)
    print(f"\n== profile: {config} × {body_name}, {iterations} requests (cProfile inflates small calls)")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(top)


def table(cases: Sequence[Case]) -> str:
    """Cumulative medians per stage (µs per request), the last column being the total."""
    head = ["config", "body", *STAGES]
    rows = [head]
    for case in cases:
        rows.append([case.config, case.body, *(f"{case.cumulative_us[s]:.1f}" for s in STAGES)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for j, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def to_json(cases: Sequence[Case], args: argparse.Namespace) -> dict[str, Any]:
    return {
        "command": command_line(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "repeats": args.repeats,
        "stages": list(STAGES),
        "unit": "microseconds per request (median over repeats)",
        "clock": "process CPU time" if args.cpu_time else "wall time",
        "tracing": {"sample_ratio": args.tracing} if args.tracing is not None else None,
        "cases": [
            {
                "config": c.config,
                "body": c.body,
                "body_bytes": c.body_bytes,
                "iterations": c.iterations,
                "cumulative_us": c.cumulative_us,
                "stage_us": {k: round(v, 2) for k, v in c.stage_us().items()},
                "runs_us": c.runs_us,
            }
            for c in cases
        ],
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Time the gateway's per-request work outside HTTP (parse, candidates, scheduler "
        "decision, lifecycle and telemetry, admission/breaker bookkeeping), in-process, per "
        "stage. Stages are cumulative: the last column is the whole per-request cost."
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "stages (cumulative):\n" + "\n".join(f"  {k:<12} {v}" for k, v in STAGE_HELP.items())
    p.add_argument(
        "--configs", default=",".join(DEFAULT_CONFIGS),
        help="comma-separated example names or YAML paths (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--bodies", default=",".join(DEFAULT_BODIES),
        help=f"comma-separated bodies among {', '.join(BODIES)} (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--iterations", type=int, default=3000,
        help="requests per repeat for small bodies; bodies over 100 KB get a tenth (default: %(default)s)",
    )  # fmt: skip
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per stage (default: %(default)s)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the raw figures to FILE")
    p.add_argument(
        "--cpu-time", action="store_true",
        help="time the process's CPU instead of wall time (for a shared, loaded machine)",
    )  # fmt: skip
    p.add_argument(
        "--tracing", type=float, nargs="?", const=1.0, metavar="RATIO",
        help="trace requests (OpenTelemetry; RATIO of them sampled, default 1) with spans exported to a "
        "local sink; needs the tracing extra",
    )  # fmt: skip
    p.add_argument(
        "--profile", type=int, metavar="TOP", default=0,
        help="after timing, print a cProfile of the whole path per case: the TOP functions by own time",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bodies = [b.strip() for b in args.bodies.split(",") if b.strip()]
    unknown = [b for b in bodies if b not in BODIES]
    if unknown:
        print(f"unknown body {unknown[0]!r}; choose among {', '.join(BODIES)}", file=sys.stderr)
        return 2
    try:
        for name in configs:
            resolve(name)
    except UnknownSystem as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.iterations < 1 or args.repeats < 1:
        print("--iterations and --repeats must be at least 1", file=sys.stderr)
        return 2
    if args.tracing is not None and not 0.0 <= args.tracing <= 1.0:
        print("--tracing RATIO must be between 0 and 1", file=sys.stderr)
        return 2
    sink = otlp_sink() if args.tracing is not None else None
    collector = f"http://127.0.0.1:{sink.server_address[1]}" if sink is not None else None
    cases = []
    try:
        for config in configs:
            for name in bodies:
                case = measure(
                    config, name, args.iterations, args.repeats, cpu_time=args.cpu_time, tracing=collector,
                    sample_ratio=args.tracing if args.tracing is not None else 1.0,
                )  # fmt: skip
                cases.append(case)
                print(f"  measured {config} × {name}", file=sys.stderr)
    finally:
        if sink is not None:
            sink.shutdown()
    print("µs per request, cumulative by stage (median of repeats)")
    print(table(cases))
    if args.json is not None:
        write_json(args.json, to_json(cases, args))
        print(f"wrote {args.json}")
    for config in configs:
        for name in bodies if args.profile else ():
            n = args.iterations if len(body(BODIES[name])) < SMALL_BODY else max(20, args.iterations // 10)
            profile(config, name, n, args.profile)
    return 0
