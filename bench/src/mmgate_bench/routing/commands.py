"""The routing verbs of ``mmgate bench``: ``run`` and ``des`` (a rate ladder over several systems),
``plot`` (redraw a saved report), ``compare`` (two reports side by side), ``export`` (a workload as
OpenAI request JSONL).

Each verb is a pair ``add_*_arguments(parser)`` / function of the parsed arguments, registered in
:mod:`mmgate_bench.cli`. A mistake in the flags (a shape flag the workload does not take, an
unknown system, a bad rate list) is a message and exit status 2, as everywhere in ``mmgate``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from mmgate_bench.cli import command_line
from mmgate_bench.routing import report
from mmgate_bench.routing.records import Ladder, RungResult, parse_rates
from mmgate_bench.workloads.synthetic import GENERATORS, PROMPT_ORDERS, Workload, build, in_prompt_order

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
    "video_fraction": (float, "share of requests with a video clip (mixed-av)"),
    "audio_fraction": (float, "share of requests with an audio clip (mixed-av)"),
}


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


class UsageError(ValueError):
    """A flag that does not fit: reported as ``mmgate bench VERB: message`` with exit status 2."""


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """``mmgate bench run``: over HTTP by default (real processes on loopback), ``--des`` for virtual time."""
    _add_ladder_arguments(run, des_only=False)


def add_des_arguments(des: argparse.ArgumentParser) -> None:
    """``mmgate bench des``: ``run --des`` under its own name (no HTTP-only flags)."""
    _add_ladder_arguments(des, des_only=True)


def _add_ladder_arguments(run: argparse.ArgumentParser, des_only: bool) -> None:
    from mmgate_bench.routing.systems import systems_help

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
    run.add_argument(
        "--systems",
        default="round-robin,aggregated,encoder-affinity",
        help="comma-separated systems to compare (default: %(default)s). " + systems_help(),
    )
    run.set_defaults(ladder_verb="des" if des_only else "run")
    if des_only:
        run.set_defaults(des=True, speedup=1.0, url=None)
    else:
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
        "--kv-blocks",
        type=int,
        default=None,
        help="DES: each pod's KV capacity in blocks (default: the profile's); small values make pods evict",
    )
    run.add_argument(
        "--scrape-interval-ms",
        type=float,
        default=None,
        help="DES: metrics scrape interval (default: config)",
    )
    run.add_argument(
        "--ttft-slo", type=float, default=2.0, help="TTFT p90 SLO (s) for the sustained-rate line"
    )
    run.add_argument(
        "--prompt-order",
        choices=PROMPT_ORDERS,
        default="mmgate",
        help="how rungs draw prompts: the workload's own order, or inference-perf's (one seeded "
        "shuffle of the prompt list cycled across every rung); caches carry rung to rung either way",
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
            raise UsageError(f"--{key.replace('_', '-')} does not apply to workload {args.workload}")
        overrides[key] = value
    size = getattr(args, "w_image_size", None)
    if size:
        if "width" not in accepted:
            raise UsageError(f"--image-size does not apply to workload {args.workload}")
        w, _, h = size.lower().partition("x")
        if not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
            raise UsageError(f"--image-size takes WIDTHxHEIGHT in pixels, like 1280x720 (got {size!r})")
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


def _refuse(verb: str, why: object) -> int:
    console.print(f"[red]mmgate bench {verb}:[/] {why}", highlight=False)
    return 2


def run_ladder(args: argparse.Namespace) -> int:
    """``run`` and ``des``: the workload over the rate ladder for each system; report.{json,md} + PNGs."""
    from mmgate_bench.routing.systems import UnknownSystem, parse_systems

    verb = args.ladder_verb
    try:
        ladder = ladder_from_args(args)
        systems = parse_systems(args.systems) if not args.url else []
        workload = in_prompt_order(workload_from_args(args), args.prompt_order, args.seed)
    except (ValueError, UnknownSystem) as exc:
        return _refuse(verb, exc)
    if args.jsonl is not None and not args.jsonl.is_file():
        return _refuse(verb, f"--jsonl {args.jsonl}: no such file")
    if args.kv_blocks is not None and (not args.des or args.kv_blocks < 1):
        return _refuse(verb, "--kv-blocks takes a positive block count, in the discrete-event mode (--des)")
    if args.jsonl is not None:
        from mmgate_bench.workloads.synthetic import load_jsonl, shuffled_replay

        replay = load_jsonl(args.jsonl)
        if args.prompt_order == "inference-perf":
            replay = shuffled_replay(replay, args.seed)
        name = args.jsonl.stem
    else:
        replay = None
        name = workload.name
    started = time.perf_counter()
    results: list[RungResult]
    if args.des:
        des = importlib.import_module("mmgate_bench.routing.des")
        opts = des.DesOptions(
            profile=args.profile,
            pods=args.pods,
            network_delay_s=args.network_delay_ms / 1000,
            scrape_interval_s=None if args.scrape_interval_ms is None else args.scrape_interval_ms / 1000,
            engine={} if args.kv_blocks is None else {"num_gpu_blocks": args.kv_blocks},
        )
        results = des.run_des(
            workload, systems, ladder, opts, replay=replay, progress=not args.quiet, log=console.print
        )
    else:
        http = importlib.import_module("mmgate_bench.routing.http_mode")
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
        "prompt_order": args.prompt_order,
        "wall_s": round(elapsed, 2),
        "command": command_line(),
    }  # fmt: skip
    written = report.write_all(records, args.out, title=name, meta=meta, ttft_slo_s=args.ttft_slo)
    print(report.markdown(records, name, args.ttft_slo))
    console.print(f"wrote {', '.join(str(p) for p in written)} in {elapsed:.1f}s")
    return 0


def add_plot_arguments(plot: argparse.ArgumentParser) -> None:
    plot.add_argument("folder", type=Path, help="a folder holding report.json (searched recursively)")
    plot.add_argument("--ttft-slo", type=float, default=2.0, help="TTFT p90 SLO for the sustained rate")


def plot(args: argparse.Namespace) -> int:
    """Redraw report.md and the PNGs of every saved report.json under a folder."""
    found = sorted(args.folder.rglob("report.json")) if args.folder.is_dir() else []
    if not found:
        return _refuse("plot", f"no report.json under {args.folder}")
    for path in found:
        records, meta = report.read_json(path)
        title = str(meta.get("workload", path.parent.name))
        (path.parent / "report.md").write_text(report.markdown(records, title, args.ttft_slo))
        pngs = report.plot(records, path.parent, title)
        console.print(f"{path.parent}: report.md, {', '.join(p.name for p in pngs)}")
    return 0


def add_export_arguments(export: argparse.ArgumentParser) -> None:
    export.add_argument("--workload", choices=sorted(GENERATORS), required=True)
    export.add_argument(
        "--n", type=int, default=None, help="requests in draw order (default: every item once)"
    )
    export.add_argument("--model", default="Qwen/Qwen3-VL-32B-Instruct")
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("out", type=Path, help="JSONL file to write")
    _add_workload_flags(export)


def export(args: argparse.Namespace) -> int:
    """Write a workload as OpenAI chat request JSONL, for replay by any load generator."""
    from mmgate_bench.workloads.synthetic import export_jsonl

    try:
        workload = workload_from_args(args)
    except UsageError as exc:
        return _refuse("export", exc)
    n = export_jsonl(workload, args.out, n=args.n, model=args.model)
    console.print(f"wrote {n} requests of {workload.name} to {args.out}")
    return 0


def add_compare_arguments(compare: argparse.ArgumentParser) -> None:
    compare.add_argument("a", type=Path, help="first report.json (or its folder)")
    compare.add_argument("b", type=Path, help="second report.json (or its folder)")


def compare(args: argparse.Namespace) -> int:
    """Two reports side by side, e.g. HTTP against DES of one scenario."""
    paths = [p / "report.json" if p.is_dir() else p for p in (args.a, args.b)]
    for p in paths:
        if not p.exists():
            return _refuse("compare", f"{p} does not exist")
    (a, meta_a), (b, meta_b) = (report.read_json(p) for p in paths)
    names = [str(m.get("mode") or p.parent.name) for m, p in zip((meta_a, meta_b), paths, strict=True)]
    if names[0] == names[1]:
        names = ["A", "B"]
    print(report.compare(a, b, names[0], names[1]))
    return 0
