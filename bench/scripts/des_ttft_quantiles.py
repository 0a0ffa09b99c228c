"""TTFT quantiles and tail shares of one DES rung, per request, for systems side by side.

A ladder's report gives p50/p90/p99. Where a rung's TTFTs are bimodal (shared-prefix: prefix hits
at ~0.1 s, cold prefills at ~0.35 s), its p90 sits on the knee between the two and swings with a
few requests; this prints the quantiles around it and the share of requests above thresholds, so
a p90 gap can be told from a shift of the whole distribution (a DES-against-HTTP TTFT p90 gap on
shared-prefix, docs/benchmarks/fidelity.md):

    PYTHONPATH=src python bench/scripts/des_ttft_quantiles.py --systems aggregated,predicted-ttft \\
        --workload shared-prefix --rates 10,20 --duration 100 --rung 20

One JSON object per system on stdout. Run it from two checkouts to compare trees.
"""

from __future__ import annotations

import argparse
import json
import sys

from mmgate_bench.routing import des
from mmgate_bench.routing.records import Ladder, parse_rates
from mmgate_bench.routing.systems import UnknownSystem, parse_systems
from mmgate_bench.stats import percentiles
from mmgate_bench.workloads.synthetic import build

QUANTILES = (0.5, 0.8, 0.85, 0.88, 0.9, 0.92, 0.95, 0.99)
THRESHOLDS = (0.12, 0.15, 0.2, 0.3)


def quantiles(ttfts: list[float]) -> dict[str, float]:
    """Quantiles (mmgate_bench.stats' convention), the share above each threshold, and the mean."""
    t = sorted(ttfts)
    n = len(t)
    out: dict[str, float] = {"n": float(n)}
    for q, value in zip(QUANTILES, percentiles(t, [q * 100 for q in QUANTILES]), strict=True):
        out[f"p{round(q * 100)}"] = round(value or 0.0, 4)
    for th in THRESHOLDS:
        out[f">{th}"] = round(sum(1 for v in t if v > th) / n, 4)
    out["mean"] = round(sum(t) / n, 4)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", required=True)
    ap.add_argument("--workload", default="shared-prefix")
    ap.add_argument("--profile", default=des.DesOptions().profile)
    ap.add_argument("--rates", default="10,20")
    ap.add_argument("--duration", type=float, default=100.0)
    ap.add_argument("--rung", type=float, help="the rate to report (default: the last)")
    args = ap.parse_args(argv)
    try:
        systems = parse_systems(args.systems)
        rates = parse_rates(args.rates)
        workload = build(args.workload)
    except (UnknownSystem, ValueError) as exc:
        print(f"des_ttft_quantiles: {exc}", file=sys.stderr)
        return 2
    rung = rates[-1] if args.rung is None else args.rung
    if rung not in rates:
        print(f"des_ttft_quantiles: --rung {rung:g} is not one of --rates", file=sys.stderr)
        return 2
    opts = des.DesOptions(profile=args.profile)
    for system in systems:
        results = des.run_des(
            workload, [system], Ladder(tuple(rates), args.duration), opts, progress=False, log=lambda _: None
        )
        for result in results:
            if result.rate == rung:
                ttfts = [r.ttft_s for r in result.records if r.ttft_s is not None]
                row = {"system": system.name, "workload": args.workload, "rate": rung, **quantiles(ttfts)}
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
