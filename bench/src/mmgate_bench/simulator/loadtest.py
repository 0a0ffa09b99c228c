"""Benchmarks of the simulated fleet itself, through HTTP with a streaming client.

``mmgate bench loadtest calibrate``: single requests at qwen2-vl-2b-rtx4060's three
measured image sizes; the time to first token and the time per output token seen by the client
against the measured stage times the profile was calibrated to.

``mmgate bench loadtest capacity``: N pods in one ``mmgate sim`` process and an open-loop
client on the same machine, a ladder of request rates of a three-image, fixed-output workload;
per rate the completion rate, client TTFT/TPOT, the CPU both processes used and whether the pods
kept real time (their ``busy_wall / busy_sim`` seconds).

Both start ``mmgate sim`` as a subprocess (so the client does not share its event loop) and
write raw JSON next to a printed table.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from PIL import Image
from rich.console import Console

from mmgate.tables import Table, add_format_argument, columns, emit
from mmgate_bench.processes import child_env
from mmgate_bench.procstat import cpu_seconds, own_cpu_seconds
from mmgate_bench.results import write_json
from mmgate_bench.stats import median, percentile

TOKEN_MARK = b'"delta":{"content":'

# qwen2-vl-2b on an RTX 4060, batch 1, bf16 (issue 4): image size -> (first token ms, decode ms/token)
CALIBRATION = {
    (336, 224): (90.0, 24.4),
    (672, 448): (238.0, 25.3),
    (1344, 896): (1143.0, 27.1),
}


# --- synthetic media -----------------------------------------------------------------------------


def base_png(width: int, height: int, color: tuple[int, int, int] = (90, 120, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def unique_png(png: bytes, tag: int) -> bytes:
    """The same picture with a ``tEXt`` chunk carrying ``tag``: new bytes, so a new media identity,
    at the cost of a CRC instead of a re-encode."""
    data = b"mmgate\x00" + str(tag).encode()
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    ihdr_end = 8 + 25  # signature + IHDR chunk
    return png[:ihdr_end] + chunk + png[ihdr_end:]


def chat_body(
    model: str, images: Sequence[bytes], text: str, max_tokens: int, *, stream: bool = True
) -> bytes:
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(p).decode()}}
        for p in images
    ]
    content.append({"type": "text", "text": text})
    doc = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(doc).encode()


# --- client --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    sent_at: float
    status: int = 0
    ttft: float | None = None
    tpot: float | None = None
    tokens: int = 0
    done_at: float = 0.0
    error: str | None = None


async def stream_one(session: aiohttp.ClientSession, url: str, body: bytes) -> Result:
    """Post one streaming request; time the first token chunk and the mean gap after it."""
    res = Result(time.perf_counter())
    try:
        async with session.post(
            url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            res.status = resp.status
            first = last = 0.0
            async for chunk in resp.content.iter_any():
                n = chunk.count(TOKEN_MARK)
                if n:
                    now = time.perf_counter()
                    if not res.tokens:
                        first = now
                        res.ttft = now - res.sent_at
                    res.tokens += n
                    last = now
            if res.tokens > 1:
                res.tpot = (last - first) / (res.tokens - 1)
    except (aiohttp.ClientError, OSError) as exc:
        res.error = type(exc).__name__
    res.done_at = time.perf_counter()
    return res


# --- the simulator process -----------------------------------------------------------------------


class SimProcess:
    """``mmgate sim`` in a subprocess; ``urls`` once it is listening."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.urls: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp = tempfile.TemporaryDirectory()

    def __enter__(self) -> SimProcess:
        endpoints = Path(self._tmp.name) / "endpoints.json"
        cmd = [sys.executable, "-m", "mmgate", "sim", *self.args, "--endpoints-file", str(endpoints)]
        # run the same mmgate as this process, wherever it was imported from
        env = child_env()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 60
        while not endpoints.exists():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"mmgate sim exited: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError("mmgate sim did not start in 60 s")
            time.sleep(0.05)
        self.urls = [p["url"] for p in json.loads(endpoints.read_text())]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._tmp.cleanup()

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        return cpu_seconds([self.proc.pid])


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The unlabelled sums of a pod's counters (enough for the totals we compare)."""
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


# --- calibrate -----------------------------------------------------------------------------------


def virtual_ttft_ms(profile: str, body: bytes) -> float:
    """The same request in a fresh engine in virtual time: what HTTP adds is the difference."""
    from mmgate.request.view import Api
    from mmgate.sim.core import Engine
    from mmgate.sim.core.media import payloads_of
    from mmgate.sim.core.types import SimRequest
    from mmgate.sim.ingest import ingest
    from mmgate.sim.profiles import family_of
    from mmgate.tokens import PricingConfig

    engine = Engine(profile)
    job = ingest(
        body, {}, Api.CHAT, PricingConfig(family=family_of(engine.profile)), natural_output_tokens=16
    )
    req = SimRequest.from_sequence("calibration", job.sequence, 2, media=payloads_of(job.view.assets))
    now = engine.preprocess(req, 0.0)
    engine.add_request(req, now)
    while True:
        out = engine.step(now)
        now += out.duration
        if out.first_token:
            return now * 1000


async def _calibrate(
    urls: list[str], profile: str, model: str, repeats: int, max_tokens: int
) -> list[dict[str, Any]]:
    rows = []
    async with aiohttp.ClientSession() as session:
        for size, (ttft_ms, tpot_ms) in CALIBRATION.items():
            png = base_png(*size)
            ttfts, tpots = [], []
            for i in range(repeats):
                body = chat_body(model, [unique_png(png, i)], "Describe the image.", max_tokens)
                res = await stream_one(session, urls[0], body)
                if res.error or res.status != 200 or res.ttft is None or res.tpot is None:
                    raise RuntimeError(f"request failed: {res}")
                ttfts.append(res.ttft * 1000)
                tpots.append(res.tpot * 1000)
                await asyncio.sleep(0.05)
            ttft = median(ttfts)
            tpot = median(tpots)
            rows.append(
                {
                    "image": f"{size[0]}x{size[1]}",
                    "engine_ttft_ms": virtual_ttft_ms(profile, body),
                    "ttft_ms": ttft,
                    "ttft_target_ms": ttft_ms,
                    "ttft_error": ttft / ttft_ms - 1,
                    "tpot_ms": tpot,
                    "tpot_target_ms": tpot_ms,
                    "tpot_error": tpot / tpot_ms - 1,
                    "samples": repeats,
                }
            )
    return rows


def calibrate(args: argparse.Namespace) -> int:
    console = Console(stderr=True)  # stdout carries the table in the chosen --format
    with SimProcess(["--profile", args.profile, "--pods", "1", "--base-port", "0"]) as sim:
        rows = asyncio.run(_calibrate(sim.urls, args.profile, args.model, args.repeats, args.max_tokens))
    heads = (
        "image", "TTFT ms", "engine alone", "TTFT target", "TTFT error",
        "TPOT ms", "TPOT target", "TPOT error",
    )  # fmt: skip
    table = Table(
        columns(*heads, numeric=heads),
        title=f"{args.profile} through HTTP (median of {args.repeats}, streaming client)",
    )
    for r in rows:
        table.add(
            r["image"],
            f"{r['ttft_ms']:.1f}",
            f"{r['engine_ttft_ms']:.1f}",
            f"{r['ttft_target_ms']:.0f}",
            f"{r['ttft_error']:+.1%}",
            f"{r['tpot_ms']:.2f}",
            f"{r['tpot_target_ms']:.1f}",
            f"{r['tpot_error']:+.1%}",
        )
    emit([table], args.format, data=rows)
    write_json(args.out, {"benchmark": "calibrate", "profile": args.profile, "rows": rows})
    worst = max(max(abs(r["ttft_error"]), abs(r["tpot_error"])) for r in rows)
    console.print(f"worst error {worst:.1%} (goal: within 10%); wrote {args.out}")
    return 0 if worst <= 0.10 else 1


# --- capacity ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Step:
    rate: float
    sent: int
    ok: int
    errors: int
    achieved_rps: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    server_cpu: float  # cores used by the sim process during the step
    client_cpu: float
    slip: float  # busy wall / busy sim - 1 over all pods: > 0 means the pods fell behind real time
    sustained: bool
    extra: dict[str, Any] = field(default_factory=dict)


async def _capacity_step(
    sim: SimProcess,
    session: aiohttp.ClientSession,
    rate: float,
    duration: float,
    workload: Workload,
    rng: random.Random,
    time_scale: float,
) -> Step:
    """``rate`` in simulated requests per second; latencies reported in simulated milliseconds."""
    urls = sim.urls
    wall_rate = rate / time_scale
    before = [await scrape(session, u) for u in urls]
    cpu0, me0, t0 = sim.cpu_seconds(), sum(own_cpu_seconds()), time.perf_counter()
    tasks: list[asyncio.Task[Result]] = []
    next_at = t0
    i = 0
    while next_at - t0 < duration:
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(stream_one(session, urls[i % len(urls)], workload.next_body())))
        i += 1
        next_at += rng.expovariate(wall_rate)
    results = await asyncio.gather(*tasks)
    t1 = time.perf_counter()
    cpu1, me1 = sim.cpu_seconds(), sum(own_cpu_seconds())
    after = [await scrape(session, u) for u in urls]
    ok = [r for r in results if r.status == 200 and r.error is None and r.ttft is not None]
    busy_sim = sum(
        a.get("mmgate_sim:busy_sim_seconds_total", 0) - b.get("mmgate_sim:busy_sim_seconds_total", 0)
        for a, b in zip(after, before, strict=True)
    )
    busy_wall = sum(
        a.get("mmgate_sim:busy_wall_seconds_total", 0) - b.get("mmgate_sim:busy_wall_seconds_total", 0)
        for a, b in zip(after, before, strict=True)
    )
    slip = busy_wall / busy_sim - 1 if busy_sim > 0 else 0.0
    last_send = max(r.sent_at for r in results)
    window = max(last_send - t0, 1e-9)
    ttfts = [r.ttft * 1000 / time_scale for r in ok if r.ttft is not None]
    tpots = [r.tpot * 1000 / time_scale for r in ok if r.tpot is not None]
    elapsed = t1 - t0
    errors = len(results) - len(ok)
    return Step(
        rate=rate,
        sent=len(results),
        ok=len(ok),
        errors=errors,
        achieved_rps=len(ok) / window * time_scale,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        tpot_p50_ms=percentile(tpots, 50),
        tpot_p99_ms=percentile(tpots, 99),
        server_cpu=(cpu1 - cpu0) / elapsed,
        client_cpu=(me1 - me0) / elapsed,
        slip=slip,
        sustained=errors == 0 and slip < 0.05,
        extra={
            "elapsed_s": elapsed,
            "busy_sim_s": busy_sim,
            "busy_wall_s": busy_wall,
            "loadavg_1m": os.getloadavg()[0],  # the machine is shared: how busy it was
        },
    )


class Workload:
    """Request bodies made on demand, numbered across the whole run so no two are alike: every
    image new (``pool`` 0) or drawn from ``pool`` images, and a question that names the request."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.png = base_png(1280, 720)
        self.rng = random.Random(args.seed + 1)
        self.count = 0

    def next_body(self) -> bytes:
        a, i = self.args, self.count
        self.count += 1
        if a.image_pool:
            tags = sorted(self.rng.sample(range(a.image_pool), a.images))
        else:
            tags = [a.images * i + k for k in range(a.images)]
        images = [unique_png(self.png, t) for t in tags]
        return chat_body(a.model, images, f"Request {i}: compare the pictures.", a.output_tokens)


async def _capacity(args: argparse.Namespace, sim: SimProcess) -> list[Step]:
    rng = random.Random(args.seed)
    workload = Workload(args)
    steps = []
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        for rate in args.rates:
            step = await _capacity_step(sim, session, rate, args.duration, workload, rng, args.time_scale)
            steps.append(step)
            _print_step(step)
            await asyncio.sleep(args.pause)
    return steps


def _print_step(s: Step) -> None:
    print(
        f"rate {s.rate:5.1f}/s  ok {s.ok:4d}/{s.sent:<4d} achieved {s.achieved_rps:5.1f}/s  "
        f"TTFT p50 {s.ttft_p50_ms or 0:7.1f} ms  TPOT p50 {s.tpot_p50_ms or 0:6.2f} ms  "
        f"sim CPU {s.server_cpu:4.2f}  client CPU {s.client_cpu:4.2f}  slip {s.slip:+.1%}",
        flush=True,
    )


def capacity(args: argparse.Namespace) -> int:
    console = Console(stderr=True)  # stdout carries the table in the chosen --format
    sim_args = ["--profile", args.profile, "--pods", str(args.pods), "--base-port", "0"]
    sim_args += ["--time-scale", str(args.time_scale)]
    with SimProcess(sim_args) as sim:
        steps = asyncio.run(_capacity(args, sim))
    heads = (
        "offered/s", "ok", "achieved/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
        "sim CPU", "client CPU", "slip", "real time",
    )  # fmt: skip
    table = Table(
        columns(*heads, numeric=heads),
        title=f"{args.pods} x {args.profile} in one process, time scale {args.time_scale:g}, "
        f"{args.images} images 1280x720, {args.output_tokens} output tokens",
    )
    for s in steps:
        table.add(
            f"{s.rate:g}",
            f"{s.ok}/{s.sent}",
            f"{s.achieved_rps:.1f}",
            _ms(s.ttft_p50_ms),
            _ms(s.ttft_p99_ms),
            _ms(s.tpot_p50_ms),
            _ms(s.tpot_p99_ms),
            f"{s.server_cpu:.2f}",
            f"{s.client_cpu:.2f}",
            f"{s.slip:+.1%}",
            "yes" if s.sustained else "no",
        )
    emit([table], args.format, data=table.records())
    best = max((s.rate for s in steps if s.sustained), default=None)
    console.print(f"highest rate sustained in real time: {best if best is not None else 'none'} req/s")
    write_json(
        args.out,
        {
            "benchmark": "capacity",
            "profile": args.profile,
            "pods": args.pods,
            "time_scale": args.time_scale,
            "images": args.images,
            "image_pool": args.image_pool,
            "output_tokens": args.output_tokens,
            "duration_s": args.duration,
            "cpus": os.cpu_count(),
            "steps": [asdict(s) for s in steps],
            "highest_sustained_rps": best,
        },
    )
    console.print(f"wrote {args.out}")
    return 0


# --- metrics rendering --------------------------------------------------------------------------


def metrics_cost(args: argparse.Namespace) -> int:
    """Our hand-written exposition against prometheus_client on the same families, in one run."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
    from prometheus_client import Histogram as PromHistogram

    from mmgate.modelserver.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
    from mmgate.sim.core import Engine
    from mmgate.sim.metrics import PodMetrics

    engine = Engine("fast")
    ours = PodMetrics(model_name="Qwen/Qwen3-VL-32B-Instruct")
    registry = CollectorRegistry()
    labels = ("model_name", "engine")
    gauges = [Gauge(n, "h", labels, registry=registry) for n in ("a:running", "a:waiting", "a:kv")]
    counters = [Counter(f"c:counter{i}", "h", labels, registry=registry) for i in range(9)]
    phases = ("queue", "prefill", "decode", "inference")
    hists = [
        PromHistogram(f"h:{name}", "h", labels, buckets=b, registry=registry)
        for name, b in (
            ("ttft", TTFT_BUCKETS),
            ("itl", ITL_BUCKETS),
            ("e2e", E2E_BUCKETS),
            *((p, E2E_BUCKETS) for p in phases),
            ("tpot", ITL_BUCKETS),
        )
    ]
    rng = random.Random(1)
    for _ in range(1000):
        v = rng.random()
        ours.ttft.observe(v)
        ours.itl.observe(v / 20, 30)
        ours.finished(0.0, v, v * 1.5, v * 2, v * 10, 64)
        for h in hists:
            h.labels("m", "0").observe(v)
    for g in gauges:
        g.labels("m", "0").set(1)
    for c in counters:
        c.labels("m", "0").inc(5)

    def timed(fn: Any, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n * 1e6

    n = args.repeats

    def fresh() -> None:
        ours.touch()
        ours.render(engine.stats)

    def after_step() -> None:  # a decode step: token histograms changed, no request finished
        ours.ttft.observe(0.2)
        ours.itl.observe(0.012, 8)
        fresh()

    def after_finish() -> None:  # a step that also finished a request: every histogram changed
        ours.itl.observe(0.012, 8)
        ours.finished(0.0, 0.1, 0.15, 0.2, 1.0, 64)
        fresh()

    prom_hist = hists[1].labels("m", "0")
    rows = {
        "render_us": timed(fresh, n),
        "render_after_step_us": timed(after_step, n),
        "render_after_finish_us": timed(after_finish, n),
        "render_cached_us": timed(lambda: ours.render(engine.stats), n),
        "prometheus_client_generate_latest_us": timed(lambda: generate_latest(registry), n),
        "observe_us": timed(lambda: ours.itl.observe(0.012), 20 * n),
        "prometheus_client_observe_us": timed(lambda: prom_hist.observe(0.012), 20 * n),
    }
    for k, v in rows.items():
        print(f"{k:40s} {v:9.2f}")
    write_json(
        args.out, {"benchmark": "metrics", "repeats": n, **rows, "bytes": len(ours.render(engine.stats))}
    )
    return 0


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    sub = parser.add_subparsers(dest="cmd", required=True)
    cal = sub.add_parser("calibrate", help="single requests vs the profile's measured stage times")
    cal.add_argument("--profile", default="qwen2-vl-2b-rtx4060")
    cal.add_argument("--model", default="", help="model name to send (default: whatever the pod serves)")
    cal.add_argument("--repeats", type=int, default=5)
    cal.add_argument("--max-tokens", type=int, default=64)
    cal.add_argument("--out", default="results/sim-calibrate.json")
    add_format_argument(cal)
    cap = sub.add_parser("capacity", help="N pods in one process under an open-loop rate ladder")
    cap.add_argument("--profile", default="qwen3-vl-32b-h200-tp2")
    cap.add_argument("--model", default="")
    cap.add_argument("--pods", type=int, default=8)
    cap.add_argument(
        "--rates", type=lambda s: [float(x) for x in s.split(",")], default=[10.0, 20.0, 30.0, 40.0]
    )
    cap.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals per rate")
    cap.add_argument("--pause", type=float, default=3.0, help="seconds between rates")
    cap.add_argument("--images", type=int, default=3)
    cap.add_argument(
        "--image-pool", type=int, default=0, help="draw images from a pool of N (cache hits); 0 = all unique"
    )
    cap.add_argument("--output-tokens", type=int, default=300)
    cap.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="run the pods this much slower; rates are simulated req/s",
    )
    cap.add_argument("--seed", type=int, default=1)
    cap.add_argument("--out", default="results/sim-capacity.json")
    add_format_argument(cap)
    met = sub.add_parser("metrics", help="cost of rendering /metrics, ours vs prometheus_client")
    met.add_argument("--repeats", type=int, default=2000)
    met.add_argument("--out", default="results/sim-metrics.json")


def run(args: argparse.Namespace) -> int:
    commands = {"calibrate": calibrate, "capacity": capacity, "metrics": metrics_cost}
    return commands[args.cmd](args)
