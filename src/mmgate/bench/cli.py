"""``mmgate bench``: run routing benchmarks, redraw their plots, export workloads.

Verbs: ``run`` (one workload, a rate ladder, several systems, over HTTP or in virtual time),
``headline`` (the comparison ``make bench`` runs), ``plot`` (redraw a saved report),
``export`` (write a workload as OpenAI request JSONL) and ``overhead`` (gateway overhead against
direct and peer routers, owned by :mod:`mmgate.bench.overhead.harness`).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from mmgate.bench.routing import report
from mmgate.bench.routing.records import Ladder, RungResult, parse_rates
from mmgate.bench.workloads.synthetic import GENERATORS, Workload, build

console = Console(stderr=True)

# Flags that map onto workload generator parameters (only where the generator takes them).
WORKLOAD_FLAGS: dict[str, tuple[type, str]] = {
    "groups": (int, "prefix groups (shared-prefix)"),
    "prompts_per_group": (int, "prompts per group (shared-prefix)"),
    "system_tokens": (int, "shared system prompt length in tokens (shared-prefix)"),
    "question_tokens": (int, "unique question length in tokens"),
    "images": (int, "images per request (shared-prefix)"),
    "output_tokens": (int, "output tokens per request"),
    "pool": (int, "distinct images/clips (image-reuse, video, audio)"),
    "requests": (int, "distinct requests generated (image-reuse, mixed, video, audio)"),
    "zipf_s": (float, "Zipf exponent of media popularity"),
    "conversations": (int, "conversations (multi-turn-document)"),
    "turns": (int, "turns per conversation (multi-turn-document)"),
    "max_images": (int, "most images in one request (mixed)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    run = sub.add_parser("run", help="run one workload over a rate ladder against several systems")
    _add_run_arguments(run)

    headline = sub.add_parser(
        "headline",
        help="the headline comparison (discrete-event, 8 pods): shared-prefix and image-reuse",
    )
    headline.add_argument("--out", type=Path, default=Path("results/headline"), help="output folder")
    headline.add_argument(
        "--duration", type=float, default=None, help="seconds per rung (default: 100, as llm-d)"
    )
    headline.add_argument("--rates", default="5:40:5", help="rate ladder (default 5:40:5)")
    headline.add_argument("--quick", action="store_true", help="a small smoke version (seconds)")

    plot = sub.add_parser("plot", help="redraw report.md and the PNGs from a saved report.json")
    plot.add_argument("folder", type=Path, help="a folder holding report.json (searched recursively)")
    plot.add_argument("--ttft-slo", type=float, default=2.0, help="TTFT p90 SLO for the sustained rate")

    compare = sub.add_parser("compare", help="two reports side by side (e.g. HTTP vs DES of one scenario)")
    compare.add_argument("a", type=Path, help="first report.json (or its folder)")
    compare.add_argument("b", type=Path, help="second report.json (or its folder)")

    export = sub.add_parser("export", help="write a workload as OpenAI chat request JSONL")
    export.add_argument("--workload", choices=sorted(GENERATORS), required=True)
    export.add_argument(
        "--n", type=int, default=None, help="requests in draw order (default: every item once)"
    )
    export.add_argument("--model", default="Qwen/Qwen3-VL-32B-Instruct")
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("out", type=Path, help="JSONL file to write")
    _add_workload_flags(export)

    overhead = sub.add_parser("overhead", help="gateway overhead vs direct and vs peer routers")
    try:
        module = importlib.import_module("mmgate.bench.overhead.harness")
    except ModuleNotFoundError:
        overhead.set_defaults(overhead_missing=True)
    else:
        module.add_arguments(overhead)


def _add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload shape (each applies to the workloads that take it)")
    for key, (kind, text) in WORKLOAD_FLAGS.items():
        flag = key.replace("_", "-")
        g.add_argument(
            "--" + flag, dest=f"w_{key}", metavar=flag.split("-")[-1].upper(), type=kind, help=text
        )
    g.add_argument(
        "--image-size", dest="w_image_size", default=None, help="WxH of shared-prefix/document images"
    )


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--workload", choices=sorted(GENERATORS), default="shared-prefix")
    run.add_argument(
        "--jsonl", type=Path, default=None, help="replay requests from an OpenAI JSONL file instead"
    )
    run.add_argument("--profile", default="qwen3-vl-32b-h200-tp2", help="sim timing profile (name or YAML)")
    run.add_argument("--pods", type=int, default=8, help="simulated pods")
    run.add_argument("--rates", default="5:40:5", help="rates in req/s: 5,10,20 or start:stop:step")
    run.add_argument("--duration", type=float, default=100.0, help="seconds per rung")
    run.add_argument(
        "--warmup", type=float, default=0.0, help="warm-up seconds before the ladder (discarded)"
    )
    run.add_argument("--warmup-rate", type=float, default=None, help="warm-up rate (default: the first rate)")
    run.add_argument("--arrival", choices=("constant", "poisson"), default="constant")
    run.add_argument("--max-concurrency", type=int, default=None, help="cap on in-flight requests")
    run.add_argument("--drain", type=float, default=120.0, help="seconds to wait for stragglers after a rung")
    run.add_argument("--systems", default="round-robin,aggregated,encoder-affinity", help="comma-separated")
    run.add_argument("--des", action="store_true", help="discrete-event mode: virtual time, no HTTP")
    run.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="HTTP mode: simulated seconds per wall second (time-scaled pods)",
    )
    run.add_argument(
        "--url", default=None, help="HTTP mode: benchmark this OpenAI-compatible URL as system 'external'"
    )
    run.add_argument("--network-delay-ms", type=float, default=0.5, help="DES: one-way gateway↔pod delay")
    run.add_argument(
        "--scrape-interval-ms",
        type=float,
        default=None,
        help="DES: metrics scrape interval (default: config)",
    )
    run.add_argument(
        "--ttft-slo", type=float, default=2.0, help="TTFT p90 SLO (s) for the sustained-rate line"
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=Path("results"), help="output folder")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_workload_flags(run)


def workload_from_args(args: argparse.Namespace) -> Workload:
    """Build the named workload, applying only the shape flags the user gave (misfits are errors)."""
    gen = GENERATORS[args.workload]
    accepted = set(inspect.signature(gen).parameters)
    overrides: dict[str, Any] = {}
    for key in WORKLOAD_FLAGS:
        value = getattr(args, f"w_{key}", None)
        if value is None:
            continue
        if key not in accepted:
            raise SystemExit(
                f"mmgate bench: --{key.replace('_', '-')} does not apply to workload {args.workload}"
            )
        overrides[key] = value
    size = getattr(args, "w_image_size", None)
    if size:
        if "width" not in accepted:
            raise SystemExit(f"mmgate bench: --image-size does not apply to workload {args.workload}")
        w, _, h = size.lower().partition("x")
        overrides["width"], overrides["height"] = int(w), int(h)
    return build(args.workload, seed=args.seed, **overrides)


def ladder_from_args(args: argparse.Namespace) -> Ladder:
    return Ladder(
        rates=parse_rates(args.rates),
        duration_s=args.duration,
        warmup_s=args.warmup,
        warmup_rate=args.warmup_rate,
        arrival=args.arrival,
        seed=args.seed,
        max_concurrency=args.max_concurrency,
        drain_timeout_s=args.drain,
    )


def run(args: argparse.Namespace) -> int:
    verb = args.verb
    if verb == "run":
        return _run(args)
    if verb == "plot":
        return _plot(args)
    if verb == "headline":
        headline = importlib.import_module("mmgate.bench.routing.headline")
        code: int = headline.run_headline(
            args.out, duration_s=args.duration, rates=args.rates, quick=args.quick
        )
        return code
    if verb == "export":
        return _export(args)
    if verb == "compare":
        return _compare(args)
    if verb == "overhead":
        if getattr(args, "overhead_missing", False):
            print("mmgate bench overhead: not available in this build", file=sys.stderr)
            return 2
        module = importlib.import_module("mmgate.bench.overhead.harness")
        result: int = module.run(args)
        return result
    raise AssertionError(verb)


def _run(args: argparse.Namespace) -> int:
    from mmgate.bench.routing.systems import UnknownSystem, parse_systems

    try:
        ladder = ladder_from_args(args)
        systems = parse_systems(args.systems) if not args.url else []
    except (ValueError, UnknownSystem) as exc:
        console.print(f"[red]mmgate bench run:[/] {exc}")
        return 2
    workload = workload_from_args(args)
    if args.jsonl is not None:
        from mmgate.bench.workloads.synthetic import load_jsonl

        replay = load_jsonl(args.jsonl)
        name = args.jsonl.stem
    else:
        replay = None
        name = workload.name
    started = time.perf_counter()
    results: list[RungResult]
    if args.des:
        des = importlib.import_module("mmgate.bench.routing.des")
        opts = des.DesOptions(
            profile=args.profile,
            pods=args.pods,
            network_delay_s=args.network_delay_ms / 1000,
            scrape_interval_s=None if args.scrape_interval_ms is None else args.scrape_interval_ms / 1000,
        )
        results = des.run_des(
            workload, systems, ladder, opts, replay=replay, progress=not args.quiet, log=console.print
        )
    else:
        http = importlib.import_module("mmgate.bench.routing.http_mode")
        hopts = http.HttpOptions(profile=args.profile, pods=args.pods, speedup=args.speedup, url=args.url)
        results = http.run_http(
            workload, systems, ladder, hopts, replay=replay, progress=not args.quiet, log=console.print
        )
    elapsed = time.perf_counter() - started
    records = [report.summarize(r, name) for r in results]
    meta = {
        "workload": name,
        "workload_params": workload.params if replay is None else {"jsonl": str(args.jsonl)},
        "mode": "des" if args.des else "http",
        "profile": args.profile,
        "pods": args.pods,
        "ladder": {"rates": list(ladder.rates), "duration_s": ladder.duration_s, "warmup_s": ladder.warmup_s,
                   "arrival": ladder.arrival},
        "systems": {s.name: str(s.config or s.name) for s in systems},
        "speedup": args.speedup,
        "wall_s": round(elapsed, 2),
        "command": "mmgate " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else "",
    }  # fmt: skip
    written = report.write_all(records, args.out, title=name, meta=meta, ttft_slo_s=args.ttft_slo)
    print(report.markdown(records, name, args.ttft_slo))
    console.print(f"wrote {', '.join(str(p) for p in written)} in {elapsed:.1f}s")
    return 0


def _plot(args: argparse.Namespace) -> int:
    found = sorted(args.folder.rglob("report.json")) if args.folder.is_dir() else []
    if not found:
        console.print(f"[red]mmgate bench plot:[/] no report.json under {args.folder}")
        return 2
    for path in found:
        records, meta = report.read_json(path)
        title = str(meta.get("workload", path.parent.name))
        (path.parent / "report.md").write_text(report.markdown(records, title, args.ttft_slo))
        pngs = report.plot(records, path.parent, title)
        console.print(f"{path.parent}: report.md, {', '.join(p.name for p in pngs)}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from mmgate.bench.workloads.synthetic import export_jsonl

    workload = workload_from_args(args)
    n = export_jsonl(workload, args.out, n=args.n, model=args.model)
    console.print(f"wrote {n} requests of {workload.name} to {args.out}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    paths = [p / "report.json" if p.is_dir() else p for p in (args.a, args.b)]
    for p in paths:
        if not p.exists():
            console.print(f"[red]mmgate bench compare:[/] {p} does not exist")
            return 2
    (a, meta_a), (b, meta_b) = (report.read_json(p) for p in paths)
    names = [str(m.get("mode") or p.parent.name) for m, p in zip((meta_a, meta_b), paths, strict=True)]
    if names[0] == names[1]:
        names = ["A", "B"]
    print(report.compare(a, b, names[0], names[1]))
    return 0
