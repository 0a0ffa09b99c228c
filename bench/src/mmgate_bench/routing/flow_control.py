"""``mmgate bench flow-control``: noisy neighbours in virtual time, with and without flow control.

Two tenants share a fleet of simulated pods (the DES: the real scheduler, request controller and
flow control, the real simulated engines). Four systems, the same aggregated scheduler each:

- ``none``: no flow control (every request goes to a pod at once);
- ``global-fcfs``: flow control, llm-d's default ``global-strict-fairness-policy``;
- ``round-robin``: flow control, llm-d's ``round-robin-fairness-policy`` (request counts);
- ``media-cost``: flow control, mmgate's ``media-cost-fairness-policy`` (pod time).

Scenarios (``--scenario``):

- ``light-victim``: A sends one small image (448x336) and a short question at a steady rate well
  inside capacity; B floods with eight 1280x720 photos per request at ``--overload`` times what
  the fleet serves of B alone.
- ``cheap-vs-heavy``: A sends many cheap requests (one small image) at ``--a-share`` of what the
  fleet serves of A alone; B offers ``--overload`` times the fleet in six-to-eight-photo requests.
- ``priority``: A's light requests are ``critical`` (priority 10), B's eight-photo flood is
  ``batch`` (priority -1, sheddable): under flow control B is refused (429) while the pods are
  saturated, and A is served first.

Capacities are measured first, in the same run (each tenant alone, flooded): a tenant's *fleet
share* is then its served rate over its capacity, so shares add up to about 1 when the fleet is
busy, whatever the request shapes. TTFT counts from arrival (held time included).

``--http`` runs the same scenario over real HTTP (:mod:`~mmgate_bench.routing.flow_control_http`);
``--plot`` draws the report beside the JSON (:mod:`~mmgate_bench.routing.flow_plots`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mmgate_bench.routing.des import DesOptions, Simulation
from mmgate_bench.routing.flow_plots import plot_report
from mmgate_bench.routing.flow_results import (
    Tenant,
    print_report,
    report_head,
    summary,
    system_row,
    tally,
    to_json,
)
from mmgate_bench.routing.flow_scenarios import SCENARIOS, SYSTEMS, Load, Plan, Schedule, config_of, plan
from mmgate_bench.routing.systems import System


def run_system(
    name: str, schedule: Schedule, opts: DesOptions, window: tuple[float, float, int], folder: Path
) -> tuple[dict[str, Tenant], float]:
    """One system over ``schedule``; ``window``: (seconds of arrivals, drain, in-flight tokens)."""
    duration_s, drain_s, inflight_tokens = window
    path = folder / f"{name}.yaml"
    path.write_text(config_of(name, inflight_tokens))
    sim = Simulation(System(name, config=path), opts)
    started = time.perf_counter()
    result = sim.run_schedule(schedule, 0.0, duration_s, drain_s)
    return tally(result.records, duration_s), time.perf_counter() - started


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario", choices=SCENARIOS, default="light-victim",
        help="light-victim: A light, B floods with eight photos; cheap-vs-heavy: A many cheap requests "
        "(--a-share of its capacity), B six to eight photos; priority: light-victim with A critical and "
        "B sheddable (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", default="qwen3-vl-32b-h200-tp2", help="simulated pod profile (default: %(default)s)"
    )
    parser.add_argument("--pods", type=int, default=2, help="simulated pods (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    parser.add_argument(
        "--drain", type=float, default=600.0,
        help="seconds allowed after the arrivals end (over HTTP: a request unanswered by then is lost)",
    )  # fmt: skip
    parser.add_argument("--overload", type=float, default=2.5, help="B's offered rate over B's capacity")
    parser.add_argument(
        "--a-rate", type=float, default=2.5, help="A's requests per second (not cheap-vs-heavy)"
    )
    parser.add_argument("--a-share", type=float, default=0.4, help="cheap-vs-heavy: A over A's capacity")
    parser.add_argument(
        "--max-inflight-tokens", type=int, default=8_000,
        help="flow control's detector: a pod's prefill backlog (priced prompt tokens sent, no first token "
        "yet) beyond which it is saturated, besides llm-d's thresholds (0: llm-d's thresholds alone)",
    )  # fmt: skip
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ", ".join(SYSTEMS))
    parser.add_argument(
        "--http", action="store_true",
        help="over real HTTP instead of the DES: mmgate serve before simulated pods, each in its own "
        "process, the same open-loop arrivals sent by this process in real time (one system after "
        "another, A alone first)",
    )  # fmt: skip
    parser.add_argument(
        "--access-log", action="store_true",
        help="--http: the gateway logs each request, and the report gives each tenant's time held in the "
        "gateway (p50/p90 of the requests answered 200); costs the gateway a log line per request",
    )  # fmt: skip
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("results/flow-control.json"),
        help="the report (default: %(default)s)",
    )
    parser.add_argument(
        "--plot", action="store_true",
        help="also draw the report: TTFT p90 per tenant and system, and each tenant's fleet share "
        "(PNG beside --output, same name)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        known = ", ".join(SYSTEMS)
        return _mistake(f"unknown system(s) {', '.join(unknown)}; choose from {known}")
    if args.pods < 1 or args.duration <= 0 or args.drain < 0:
        return _mistake("--pods must be at least 1, --duration above 0 and --drain not negative")
    if args.overload <= 0 or args.a_rate <= 0 or args.a_share <= 0:
        return _mistake("--overload, --a-rate and --a-share must be above 0")
    opts = DesOptions(profile=args.profile, pods=args.pods)
    load = Load(args.duration, args.overload, args.a_rate, args.a_share)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scenario = plan(args.scenario, load, opts, folder)
        if args.http:
            from mmgate_bench.routing.flow_control_http import run_http

            report = run_http(args, scenario, systems, folder)
        else:
            report = _run_des(args, scenario, systems, opts, folder)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(to_json(report))
    print_report(report)
    print(f"wrote {args.output}")
    if args.plot:
        print(f"wrote {plot_report(report, args.output.with_suffix('.png'))}")
    return 0


def _mistake(message: str) -> int:
    print(f"mmgate bench flow-control: {message}", file=sys.stderr)
    return 2


def _run_des(
    args: argparse.Namespace, scenario: Plan, systems: list[str], opts: DesOptions, folder: Path
) -> dict[str, Any]:
    window = (args.duration, args.drain, args.max_inflight_tokens)
    alone, _ = run_system("none", scenario.a, opts, window, folder)
    rows: dict[str, Any] = {}
    for name in systems:
        tenants, wall = run_system(name, scenario.both, opts, window, folder)
        rows[name] = {"wall_s": round(wall, 1), **system_row(tenants, args.duration, scenario.capacity)}
    return {
        **report_head(args, scenario, "des"),
        "a_alone": summary(alone["A"], args.duration, scenario.capacity["A"]),
        "systems": rows,
    }
