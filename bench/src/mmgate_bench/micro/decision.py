"""How long one scheduling decision takes: ``mmgate bench decision``.

The request is the llm-d aggregation guide's shape: a shared system prompt, three inline 1280×720
PNG images and ~1.3K tokens of question, parsed once by :func:`mmgate.request.parse_request`
(not timed). The scheduler is warmed with earlier requests from the same prefix groups so prefix
lookups hit, and keeps requests in flight so load scorers see load. Timed is
``Scheduler.schedule`` alone (the decision on the request path), and separately the bookkeeping
the gateway does around it (``on_started`` + ``pre_request`` + ``on_first_token`` + ``on_finished``).

The E/P/D case (:func:`run_epd`) is the same request with four images on a disaggregated fleet
(encode, prefill and decode pods, ``examples/e-p-d.yaml``): three profiles run, and the routing
headers (one encoder per image, the prefill pod) are part of the decision, because the request
cannot be sent without them, so ``schedule`` plus the before-send hooks are timed.

``--cpu-time`` reads the thread's CPU clock instead of the wall clock: on a shared, loaded
machine a decision that was descheduled halfway then counts only the time it ran.
"""

from __future__ import annotations

import argparse
import base64
import gc
import io
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from mmgate import compiled
from mmgate.config import load_config
from mmgate.request import RequestView, parse_request
from mmgate.scheduling import EndpointState, Metrics, Scheduler, SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT
from mmgate.scheduling.plugins.predicted_ttft_producer import PredictedTTFTProducer
from mmgate.scheduling.plugins.token_producer import TokenProducer
from mmgate.tables import Table, add_format_argument, columns, emit
from mmgate_bench.results import write_json
from mmgate_bench.stats import median, percentiles

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
DEFAULT_CONFIGS = ("aggregated.yaml", "encoder-affinity.yaml", "round-robin.yaml")
PREDICTED_TTFT_FLEETS = (8, 64)  # issue 17's target: < 100 µs median at 8 for three images
SYSTEM = "You are a meticulous visual analyst. Describe only what you can see. " * 6
QUESTION = "Compare the three pictures and explain what changed between them, step by step. " * 60


def _png(color: tuple[int, int, int], size: tuple[int, int] = (1280, 720)) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def three_image_views(groups: int, per_group: int, images: int = 3) -> list[RequestView]:
    """``groups`` × ``per_group`` parsed requests of ``images`` images each; each group shares its
    system prompt and images."""
    views = []
    for g in range(groups):
        urls = [_png(((g * 3 + k) % 256, (g * 7 + k) // 256 % 256, 97 + k)) for k in range(images)]
        for q in range(per_group):
            content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
            content.append({"type": "text", "text": f"Question {q}: {QUESTION}"})
            body = {
                "model": "Qwen/Qwen3-VL-32B-Instruct",
                "messages": [
                    {"role": "system", "content": f"{SYSTEM} [group {g}]"},
                    {"role": "user", "content": content},
                ],
                "stream": True,
                "max_tokens": 300,
            }
            views.append(parse_request(json.dumps(body).encode(), {}))
    return views


def unique(view: RequestView, r: int) -> RequestView:
    """The same request with a question no earlier request asked (so only the group prefix hits)."""
    parts = list(view.parts)
    last = parts[-1]
    assert isinstance(last, str)
    parts[-1] = f"[{r}] {last}"
    return msgspec.structs.replace(view, parts=parts)


def fleet(n: int, roles: Sequence[str | None] = ()) -> list[EndpointState]:
    """``n`` endpoints with metrics; the first ``len(roles)`` get those llm-d roles in order."""
    return [
        EndpointState(
            f"10.0.0.{i}:8000",
            role=roles[i] if i < len(roles) else None,
            metrics=Metrics(waiting=i % 3, kv_usage=0.1 * (i % 5), block_size=16, num_gpu_blocks=60000),
        )
        for i in range(n)
    ]


def run_one(
    scheduler: Scheduler,
    views: list[RequestView],
    endpoints: list[EndpointState],
    rounds: int,
    inflight: int,
    *,
    headers: bool = False,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> dict[str, Any]:
    """``headers``: the before-send hooks (routing headers) are timed with the decision, and the
    bookkeeping charges every stage's pod (``Scheduler.start``), as the gateway does."""
    decide: list[int] = []
    around: list[int] = []
    matches: list[float] = []
    tokens = 0
    pending: list[str] = []
    now = 0.0
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            view = unique(views[r % len(views)], r)
            req = SchedulingRequest(view, f"r{r}")
            now += 0.001
            t0 = clock()
            result = scheduler.schedule(req, endpoints, now)
            if headers:
                scheduler.pre_request_before_send(req, result, now)
            t1 = clock()
            if headers:
                scheduler.start(req, result, now)
                scheduler.pre_request_deferred(req, result, now)
            else:
                scheduler.on_started(req, result.target, now)
                scheduler.pre_request(req, result, now)
            pending.append(req.request_id)
            if len(pending) > inflight:
                done = pending.pop(0)
                scheduler.on_first_token(done, now)
                scheduler.on_finished(done, now)
            t2 = clock()
            decide.append(t1 - t0)
            around.append(t2 - t1)
            info = req.get(PREFIX_MATCH)
            if info is not None and r >= len(views):
                matches.append(info.ratio(result.target.name))
            tp = req.get(TOKENIZED_PROMPT)
            tokens = tp.total_tokens if tp is not None else tokens
    finally:
        gc.enable()
    warm = len(views)  # the first pass over the workload fills the indexes; time the rest
    d = decide[warm:]
    p50, p90, p99 = (q or 0.0 for q in percentiles(d, (50, 90, 99)))
    return {
        "decisions": len(d),
        "median_us": p50 / 1000,
        "p90_us": p90 / 1000,
        "p99_us": p99 / 1000,
        "bookkeeping_median_us": median(around[warm:]) / 1000,
        "request_tokens": tokens,
        "mean_prefix_match_on_target": statistics.fmean(matches) if matches else None,
    }


EPD_CONFIG = "e-p-d.yaml"


def epd_roles(counts: Sequence[int]) -> list[str]:
    """The fleet's roles for ``(encode, prefill, decode)`` pod counts, in that order."""
    encode, prefill, decode = counts
    return ["encode"] * encode + ["prefill"] * prefill + ["decode"] * decode


def run_epd(args: argparse.Namespace, clock: Callable[[], int]) -> dict[str, Any]:
    """The four-image E/P/D decision on the ``--epd-fleet`` (default 4 E + 4 P + 8 D)."""
    roles = epd_roles(args.epd_fleet)
    views = three_image_views(args.groups, args.per_group, images=4)
    cfg = load_config(EXAMPLES / EPD_CONFIG)
    scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)
    eps = fleet(len(roles), roles)
    row = run_one(scheduler, views, eps, args.rounds + len(views), args.inflight, headers=True, clock=clock)
    row = {
        "config": Path(EPD_CONFIG).stem,
        "images": 4,
        "fleet": "{}E/{}P/{}D".format(*args.epd_fleet),
        **row,
    }
    row["token_producer_median_us"] = pricing_cost(scheduler, views, min(args.rounds, 2000))
    return row


def _fleet_counts(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected three pod counts E,P,D such as 4,4,8, got {text!r}")
    e, p, d = (int(x) for x in parts)
    return e, p, d


def pricing_cost(scheduler: Scheduler, views: list[RequestView], rounds: int) -> float | None:
    """Median µs of the token-producer alone (pricing + pseudo-token stream), if configured."""
    producer = next((p for p in scheduler.producers if isinstance(p, TokenProducer)), None)
    if producer is None:
        return None
    times = []
    for r in range(rounds):
        req = SchedulingRequest(views[r % len(views)], f"p{r}")
        t0 = time.perf_counter_ns()
        producer.tokenize(req)
        times.append(time.perf_counter_ns() - t0)
    return median(times) / 1000


def predictor_cost(
    scheduler: Scheduler, views: list[RequestView], endpoints: list[EndpointState], rounds: int
) -> float | None:
    """Median µs of ``predicted-ttft-producer`` alone (after the producers it reads), if configured."""
    if not any(isinstance(p, PredictedTTFTProducer) for p in scheduler.producers):
        return None
    times = []
    for r in range(rounds):
        req = SchedulingRequest(unique(views[r % len(views)], r), f"t{r}")
        req.now = 1.0
        req.staleness_s = scheduler.metrics_staleness_s
        for producer in scheduler.producers:
            if isinstance(producer, PredictedTTFTProducer):
                t0 = time.perf_counter_ns()
                producer.produce(req, endpoints)
                times.append(time.perf_counter_ns() - t0)
            else:
                producer.produce(req, endpoints)
    return median(times) / 1000


def predicted_ttft_case(views: list[RequestView], rounds: int, inflight: int) -> list[dict[str, Any]]:
    """``examples/predicted-ttft.yaml`` at 8 and 64 endpoints: the whole decision, and the
    predictor's share of it (its per-candidate loop is what grows with the fleet)."""
    rows = []
    for n in PREDICTED_TTFT_FLEETS:
        cfg = load_config(EXAMPLES / "predicted-ttft.yaml")
        scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)
        eps = fleet(n)
        row = {
            "config": f"predicted-ttft @{n}",
            **run_one(scheduler, views, eps, rounds + len(views), inflight),
        }
        row["token_producer_median_us"] = pricing_cost(scheduler, views, min(rounds, 2000))
        row["predictor_median_us"] = predictor_cost(scheduler, views, eps, min(rounds, 2000))
        rows.append(row)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Time scheduling decisions for three-image requests (llm-d aggregation guide shape)."
    parser.add_argument(
        "--config", action="append", help="config YAML (repeatable); default: shipped examples"
    )
    parser.add_argument("--endpoints", type=int, default=8, help="fleet size (default 8)")
    add_format_argument(parser)
    parser.add_argument("--groups", type=int, default=40, help="prefix groups (default 40)")
    parser.add_argument("--per-group", type=int, default=5, help="requests per group (default 5)")
    parser.add_argument("--rounds", type=int, default=5000, help="decisions per config (default 5000)")
    parser.add_argument("--inflight", type=int, default=64, help="requests kept in flight (default 64)")
    parser.add_argument("--out", default="results/decision.json", help="raw JSON output")
    parser.add_argument(
        "--epd-fleet",
        type=_fleet_counts,
        default=(4, 4, 8),
        metavar="E,P,D",
        help="pods of the four-image E/P/D case (default 4,4,8: 16 endpoints)",
    )
    parser.add_argument("--no-epd", dest="epd", action="store_false", help="skip the E/P/D case")
    parser.add_argument(
        "--cpu-time", action="store_true", help="time on the thread's CPU clock (a loaded machine)"
    )


def run(args: argparse.Namespace) -> int:

    configs = [Path(c) for c in args.config] if args.config else [EXAMPLES / c for c in DEFAULT_CONFIGS]
    clock = time.thread_time_ns if args.cpu_time else time.perf_counter_ns
    views = three_image_views(args.groups, args.per_group)
    rows = []
    for path in configs:
        cfg = load_config(path)
        scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)
        eps = fleet(args.endpoints)
        timed = run_one(scheduler, views, eps, args.rounds + len(views), args.inflight, clock=clock)
        row = {"config": path.stem, **timed}
        row["token_producer_median_us"] = pricing_cost(scheduler, views, min(args.rounds, 2000))
        rows.append(row)
    if not args.config:
        rows += predicted_ttft_case(views, args.rounds, args.inflight)

    tokens = max(int(r["request_tokens"]) for r in rows)
    heads = (
        "config", "median µs", "p90 µs", "p99 µs", "token-producer µs", "predictor µs", "bookkeeping µs",
        "prefix hit",
    )  # fmt: skip
    table = Table(
        columns(*heads, numeric=heads[1:]),
        title=f"scheduling decision: 3 × 720p images, {tokens} tokens per request, "
        f"{args.endpoints} endpoints (@N: N endpoints); scheduler {compiled.status()}",
    )
    for row in rows:
        tp = row["token_producer_median_us"]
        pred = row.get("predictor_median_us")
        table.add(
            row["config"],
            f"{row['median_us']:.1f}",
            f"{row['p90_us']:.1f}",
            f"{row['p99_us']:.1f}",
            "—" if tp is None else f"{tp:.1f}",
            "—" if pred is None else f"{pred:.1f}",
            f"{row['bookkeeping_median_us']:.1f}",
            "—"
            if row["mean_prefix_match_on_target"] is None
            else f"{row['mean_prefix_match_on_target']:.2f}",
        )
    tables = [table]
    epd = run_epd(args, clock) if args.epd else None
    if epd is not None:
        epd_heads = ("config", "fleet", "median µs", "p90 µs", "p99 µs", "bookkeeping µs")
        disagg = Table(
            columns(*epd_heads, numeric=epd_heads[2:]),
            title=f"E/P/D decision with routing headers: 4 × 720p images, {epd['request_tokens']} tokens, "
            f"{sum(args.epd_fleet)} endpoints",
        )
        disagg.add(
            epd["config"],
            epd["fleet"],
            f"{epd['median_us']:.1f}",
            f"{epd['p90_us']:.1f}",
            f"{epd['p99_us']:.1f}",
            f"{epd['bookkeeping_median_us']:.1f}",
        )
        tables.append(disagg)
    emit(tables, args.format, data=rows if epd is None else [*rows, epd])
    meta: dict[str, Any] = {
        k: getattr(args, k) for k in ("endpoints", "groups", "per_group", "rounds", "inflight", "cpu_time")
    }
    meta["clock"] = "thread CPU time" if args.cpu_time else "wall (perf_counter)"
    meta["epd_fleet"] = list(args.epd_fleet) if args.epd else None
    meta["python"] = platform.python_version()
    meta["scheduler_build"] = compiled.status()  # mypyc-compiled or pure Python (mmgate.compiled)
    meta["cpus"] = os.cpu_count()
    meta["loadavg_1m"] = os.getloadavg()[0]  # the machine is shared: say how busy it was
    out = write_json(args.out, {"params": meta, "results": rows, "epd": epd})
    print(f"wrote {out}")
    return 0
