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
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmgate_bench.routing.des import DesOptions, Simulation
from mmgate_bench.routing.flow_scenarios import SYSTEMS, config_of, heavy, light
from mmgate_bench.routing.records import RequestRecord
from mmgate_bench.routing.systems import System
from mmgate_bench.stats import percentile
from mmgate_bench.workloads.synthetic import WorkItem


def stream(make: Any, rate: float, duration_s: float, seed: int) -> list[tuple[float, WorkItem]]:
    """Evenly spaced arrivals of fresh items (no cache can help: every image is new)."""
    rng = random.Random(seed)
    count = int(rate * duration_s)
    return [(i / rate, make(i, rng)) for i in range(count)]


@dataclass
class Tenant:
    sent: int = 0
    served: int = 0  # completed within the arrival window
    completed: int = 0  # completed at all
    refused: int = 0
    last_end: float = 0.0  # when its last request finished
    ttfts: list[float] | None = None

    def p(self, q: float) -> float | None:
        return percentile(self.ttfts or [], q * 100)


def tally(records: Sequence[RequestRecord], window_s: float) -> dict[str, Tenant]:
    out: dict[str, Tenant] = {}
    for r in records:
        t = out.setdefault(r.item_id.split("-")[0], Tenant(ttfts=[]))
        t.sent += 1
        if r.error is not None:
            t.refused += 1
            continue
        t.completed += 1
        if r.ttft_s is not None and t.ttfts is not None:
            t.ttfts.append(r.ttft_s)
        if r.e2e_s is not None:
            end = r.sent_s + r.e2e_s
            t.last_end = max(t.last_end, end)
            t.served += end <= window_s
    return out


def run_system(
    name: str, schedule: list[tuple[float, WorkItem]], opts: DesOptions, window: tuple[float, float, int],
    folder: Path,
) -> tuple[dict[str, Tenant], float]:  # fmt: skip
    """One system over ``schedule``; ``window``: (seconds of arrivals, drain, in-flight tokens)."""
    duration_s, drain_s, inflight_tokens = window
    text = config_of(name, inflight_tokens)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    sim = Simulation(System(name, config=path), opts)
    started = time.perf_counter()
    result = sim.run_schedule(schedule, 0.0, duration_s, drain_s)
    return tally(result.records, duration_s), time.perf_counter() - started


def capacity(make: Any, opts: DesOptions, count: int, folder: Path) -> float:
    """Requests per second the fleet completes of one shape alone: ``count`` of them sent at
    once, over the time until the last one finishes (the pods batch as deep as they can)."""
    schedule = [(0.0, item) for _, item in stream(make, 1.0, float(count), 99)]
    path = folder / "capacity.yaml"
    path.write_text(config_of("none", 0))
    result = Simulation(System("capacity", config=path), opts).run_schedule(schedule, 0.0, 0.0, 3600.0)
    ends = [r.sent_s + r.e2e_s for r in result.records if r.e2e_s is not None]
    return len(ends) / max(ends) if ends else 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario", choices=("light-victim", "cheap-vs-heavy", "priority"), default="light-victim"
    )
    parser.add_argument("--profile", default="qwen3-vl-32b-h200-tp2")
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    parser.add_argument("--drain", type=float, default=600.0, help="seconds allowed after the arrivals end")
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
        help="the reduced HTTP run instead: mmgate serve and mmgate sim pods in their own processes, "
        "A open-loop at --a-rate, B --b-clients closed-loop clients (light-victim only)",
    )  # fmt: skip
    parser.add_argument("--b-clients", type=int, default=16, help="--http: B's concurrent clients")
    parser.add_argument("--output", type=Path, default=Path("results/flow-control.json"))


def run(args: argparse.Namespace) -> int:
    if args.http:
        from mmgate_bench.routing.flow_control_http import run_http

        return run_http(args, [s for s in args.systems.split(",") if s])
    opts = DesOptions(profile=args.profile, pods=args.pods)
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        known = ", ".join(SYSTEMS)
        print(f"mmgate bench flow-control: unknown system(s) {', '.join(unknown)}; choose from {known}")
        return 2
    photos = 8

    def make_b(n: int, rng: random.Random) -> WorkItem:
        if args.scenario == "priority":
            return heavy(n, rng, photos, "@batch")
        return heavy(n, rng, photos if args.scenario == "light-victim" else 6 + n % 3)

    def make_a(n: int, rng: random.Random) -> WorkItem:
        return light(n, rng, "@critical" if args.scenario == "priority" else "")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cap_b = capacity(make_b, opts, 60, folder)
        cap_a = capacity(light, opts, 600, folder)
        a_rate = args.a_share * cap_a if args.scenario == "cheap-vs-heavy" else args.a_rate
        b_rate = args.overload * cap_b
        a = stream(make_a, a_rate, args.duration, 1)
        b = stream(make_b, b_rate, args.duration, 2)
        both = sorted(a + b, key=lambda pair: pair[0])
        rows: dict[str, Any] = {}
        window = (args.duration, args.drain, args.max_inflight_tokens)
        alone, _ = run_system("none", a, opts, window, folder)
        for name in systems:
            tenants, wall = run_system(name, both, opts, window, folder)
            rows[name] = {"wall_s": round(wall, 1)}
            for tenant, tally_ in tenants.items():
                rows[name][tenant] = _summary(tally_, args.duration, cap_a, cap_b, tenant)
            # Goodput over the whole run: every request completed, over the time until the last
            # one finished, in fleet capacity (1.0: the fleet busy with useful work throughout).
            end = max(t.last_end for t in tenants.values())
            work = sum(t.completed / (cap_a if k == "A" else cap_b) for k, t in tenants.items())
            rows[name]["goodput"] = round(work / end, 3) if end else 0.0
            rows[name]["last_end_s"] = round(end, 1)
    report = {
        "scenario": args.scenario,
        "profile": args.profile,
        "pods": args.pods,
        "duration_s": args.duration,
        "capacity_rps": {"A": round(cap_a, 3), "B": round(cap_b, 3)},
        "offered_rps": {"A": round(a_rate, 3), "B": round(b_rate, 3)},
        "max_inflight_tokens": args.max_inflight_tokens,
        "a_alone": _summary(alone["A"], args.duration, cap_a, cap_b, "A"),
        "systems": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    _print(report)
    print(f"wrote {args.output}")
    return 0


def _summary(t: Tenant, window_s: float, cap_a: float, cap_b: float, name: str) -> dict[str, Any]:
    cap = cap_a if name == "A" else cap_b
    p50, p90 = t.p(0.5), t.p(0.9)
    return {
        "sent": t.sent,
        "completed": t.completed,
        "refused_or_timed_out": t.refused,
        "served_in_window_rps": round(t.served / window_s, 3),
        "fleet_share": round(t.served / window_s / cap, 3),
        "ttft_p50_s": None if p50 is None else round(p50, 3),
        "ttft_p90_s": None if p90 is None else round(p90, 3),
    }


def _print(report: dict[str, Any]) -> None:
    print(
        f"scenario {report['scenario']}: {report['pods']} x {report['profile']}, capacity A "
        f"{report['capacity_rps']['A']}/s B {report['capacity_rps']['B']}/s, offered A "
        f"{report['offered_rps']['A']}/s B {report['offered_rps']['B']}/s"
    )
    alone = report["a_alone"]
    print(f"A alone: TTFT p90 {alone['ttft_p90_s']} s")
    base = report["systems"].get("none", {}).get("A", {}).get("ttft_p90_s")
    print(
        f"{'system':<12} {'A p90 s':>8} {'vs none':>8} {'A share':>8} {'B share':>8} {'fleet':>6} "
        f"{'goodput':>8} {'refused':>8}"
    )
    for name, row in report["systems"].items():
        a, b = row.get("A", {}), row.get("B", {})
        p90 = a.get("ttft_p90_s")
        ratio = f"{p90 / base:.2f}x" if p90 is not None and base else "-"
        fleet = (a.get("fleet_share") or 0) + (b.get("fleet_share") or 0)
        lost = (a.get("refused_or_timed_out") or 0) + (b.get("refused_or_timed_out") or 0)
        print(
            f"{name:<12} {p90!s:>8} {ratio:>8} {a.get('fleet_share')!s:>8} {b.get('fleet_share')!s:>8} "
            f"{fleet:>6.2f} {row.get('goodput')!s:>8} {lost:>8}"
        )
