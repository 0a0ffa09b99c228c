"""The headline comparison ``make bench`` runs: discrete-event mode, 8 pods, a 5→40 req/s ladder.

- **shared-prefix** (llm-d's multimodal aggregation benchmark shape): round-robin against the
  mmgate configs; where each saturates, the throughput ratio at the top rate, TTFT p90 per rate.
- **image-reuse** (popular images, unrelated questions): encoder-cache affinity against the
  prefix-only config, TTFT p90 under high load.

Each workload runs in its own process (the machine has two cores); each process reports how
many simulated requests it handled per minute of wall time, the DES throughput figure.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from mmgate_bench.results import markdown_table, write_json
from mmgate_bench.routing import report
from mmgate_bench.routing.des import DesOptions, run_des
from mmgate_bench.routing.records import Ladder, parse_rates
from mmgate_bench.routing.systems import parse_systems
from mmgate_bench.workloads.synthetic import PROMPT_ORDERS, build, in_prompt_order

PROFILE = "qwen3-vl-32b-h200-tp2"
PODS = 8
SYSTEMS = {
    "shared-prefix": "round-robin,aggregated,encoder-affinity",
    "image-reuse": "round-robin,aggregated,encoder-affinity",
}
DEFAULT_DURATION_S = 100.0
TTFT_SLO_S = 2.0

console = Console(stderr=True)


def _one(name: str, out: str, rates: str, duration_s: float, quick: bool, order: str) -> dict[str, Any]:
    """Run one workload's ladder for every system and write its report; returns timing facts."""
    workload = in_prompt_order(build(name) if not quick else build(name, **_quick_shape(name)), order)
    ladder = Ladder(rates=parse_rates(rates), duration_s=duration_s, drain_timeout_s=120.0)
    systems = parse_systems(SYSTEMS[name])
    opts = DesOptions(profile=PROFILE, pods=PODS if not quick else 2)
    started = time.perf_counter()
    cpu0 = time.process_time()
    results = run_des(workload, systems, ladder, opts, progress=False, log=console.print)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    simulated = sum(len(r.records) for r in results)
    records = [report.summarize(r, name) for r in results]
    meta = {
        "workload": name,
        "workload_params": workload.params,
        "mode": "des",
        "profile": PROFILE,
        "pods": opts.pods,
        "ladder": {"rates": list(ladder.rates), "duration_s": duration_s, "arrival": ladder.arrival},
        "prompt_order": order,
        "systems": {s.name: str(s.config) for s in systems},
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "simulated_requests": simulated,
        "simulated_requests_per_wall_minute": round(simulated / wall * 60),
        "simulated_requests_per_cpu_minute": round(simulated / max(cpu, 1e-9) * 60),
    }
    report.write_all(records, Path(out) / name, title=name, meta=meta, ttft_slo_s=TTFT_SLO_S)
    return meta


def _quick_shape(name: str) -> dict[str, Any]:
    if name == "shared-prefix":
        return {"groups": 20, "prompts_per_group": 3}
    return {"pool": 30, "requests": 200}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--out", type=Path, default=Path("results/headline"), help="output folder")
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds per rung (default: 100, as llm-d)"
    )
    parser.add_argument("--rates", default="5:40:5", help="rate ladder (default 5:40:5)")
    parser.add_argument("--quick", action="store_true", help="a small smoke version (seconds)")
    parser.add_argument(
        "--prompt-order",
        choices=PROMPT_ORDERS,
        default="mmgate",
        help="the workloads' own draw order, or inference-perf's shuffled list cycled across rungs",
    )


def run(args: argparse.Namespace) -> int:
    try:
        parse_rates(args.rates)
    except ValueError as exc:
        print(f"mmgate bench headline: {exc}", file=sys.stderr)
        return 2
    return run_headline(
        args.out, duration_s=args.duration, rates=args.rates, quick=args.quick, order=args.prompt_order
    )


def run_headline(
    out: Path,
    duration_s: float | None = None,
    rates: str = "5:40:5",
    quick: bool = False,
    order: str = "mmgate",
) -> int:
    """Both workloads (in parallel processes), then summary.md / summary.json in ``out``."""
    duration = duration_s or (3.0 if quick else DEFAULT_DURATION_S)
    if quick:
        rates = "2,4"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    names = list(SYSTEMS)
    console.print(
        f"headline: {', '.join(names)} on {PODS} simulated pods ({PROFILE}), "
        f"rates {rates}, {duration:g} s per rung, {order} prompt order"
    )
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes=min(2, len(names))) as pool:
        metas = pool.starmap(_one, [(n, str(out), rates, duration, quick, order) for n in names])
    wall = time.perf_counter() - started
    text, facts = summary(out, metas, wall)
    (out / "summary.md").write_text(text)
    write_json(out / "summary.json", facts)
    print(text)
    console.print(f"wrote {out}/summary.md, {out}/<workload>/report.{{json,md}} and PNGs in {wall:.0f}s")
    return 0


def _by(records: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    return sorted((r for r in records if r["system"] == system), key=lambda r: r["rate"])


def summary(out: Path, metas: list[dict[str, Any]], wall: float) -> tuple[str, dict[str, Any]]:
    """The headline's numbers, computed from the written reports (nothing typed in by hand)."""
    facts: dict[str, Any] = {"wall_s": round(wall, 1), "workloads": {}}
    lines = ["# mmgate headline benchmark (discrete-event mode)", ""]
    for meta in metas:
        name = meta["workload"]
        records, _ = report.read_json(out / name / "report.json")
        systems = list(dict.fromkeys(r["system"] for r in records))
        sustained = {s: report.sustained_rate(_by(records, s), TTFT_SLO_S) for s in systems}
        top = max(r["rate"] for r in records)
        at_top = {s: next(r for r in _by(records, s) if r["rate"] == top) for s in systems}
        f: dict[str, Any] = {
            "sustained_rate": sustained,
            "top_rate": top,
            "output_tokens_per_s_at_top": {s: at_top[s]["output_tokens_per_s"] for s in systems},
            "ttft_p90_s": {s: {str(r["rate"]): r["ttft_p90_s"] for r in _by(records, s)} for s in systems},
            "simulated_requests_per_wall_minute": meta["simulated_requests_per_wall_minute"],
            "simulated_requests_per_cpu_minute": meta["simulated_requests_per_cpu_minute"],
            "wall_s": meta["wall_s"],
        }
        facts["workloads"][name] = f
        lines += [f"## {name}", ""]
        lines.append(
            f"Sustained rate (TTFT p90 ≤ {TTFT_SLO_S:g} s, no failures) "
            f"and output throughput at {top:g} req/s:"
        )
        lines.append("")
        base = at_top.get("round-robin")
        for s in systems:
            ratio = ""
            if base and s != "round-robin" and base["output_tokens_per_s"] > 0:
                ratio = (
                    f" ({at_top[s]['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}× round-robin)"
                )
            rate = sustained[s]
            lines.append(
                f"- **{s}**: sustained {f'{rate:g} req/s' if rate is not None else 'below the lowest rung'}; "
                f"{at_top[s]['output_tokens_per_s']:,.0f} output tok/s at {top:g} req/s{ratio}"
            )
        lines += ["", "TTFT p90 (s) by rate:", ""]
        rates = sorted({r["rate"] for r in records})
        table = []
        for s in systems:
            row = {r["rate"]: r["ttft_p90_s"] for r in _by(records, s)}
            table.append([s, *(_num(row.get(r)) for r in rates)])
        lines += markdown_table(["system", *(f"{r:g}" for r in rates)], table)
        speed = (
            f"DES speed (one process): {meta['simulated_requests']:,} simulated requests in "
            f"{meta['cpu_s']:.0f} s of CPU = {meta['simulated_requests_per_cpu_minute']:,} per CPU-minute "
            f"({meta['wall_s']:.0f} s wall = {meta['simulated_requests_per_wall_minute']:,} per wall minute "
            "on a shared machine)."
        )
        lines += ["", speed, ""]
    lines.append(f"Total wall time: {wall:.0f} s.")
    return "\n".join(lines) + "\n", facts


def _num(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"
