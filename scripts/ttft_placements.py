"""Where a DES ladder's placements went: cold placements, and how evenly content is partitioned.

The experiment behind docs/benchmarks/predicted-ttft.md's shared-prefix section. For each system
and rung it counts, in send order, a request's *first* placement of its content (no pod has had
it), *warm* ones (the pod has had it) and *cold* ones (another pod has had it: a copy), and how
evenly the content and the requests spread over the pods (coefficient of variation, busiest pod
over the mean). Content is a shared-prefix group, or a request's first media item elsewhere.

    python scripts/ttft_placements.py --systems aggregated,predicted-ttft \\
        --workload shared-prefix --rates 10,20,30,40 --duration 100 [--kv-blocks 400000]

One JSON object per rung on stdout (also the TTFT p90 and the fleet's prefix-cache hit ratio).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from mmgate.bench.routing import des
from mmgate.bench.routing.records import Ladder, RequestRecord, parse_rates
from mmgate.bench.routing.systems import UnknownSystem, parse_systems
from mmgate.bench.workloads.synthetic import Workload, build


def _content_of(workload: Workload) -> dict[str, str]:
    """Each work item's content key: its prefix group (shared-prefix), else its group label."""
    return {item.id: item.group or item.id for item in workload.items}


def _cv(values: list[int]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) if values else 0.0


def _quantile(sorted_values: list[float], q: float) -> float | None:
    return sorted_values[int(q * (len(sorted_values) - 1))] if sorted_values else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", required=True)
    ap.add_argument("--workload", default="shared-prefix")
    ap.add_argument("--profile", default="qwen3-vl-32b-h200-tp2")
    ap.add_argument("--rates", default="10,20,30,40")
    ap.add_argument("--duration", type=float, default=100.0)
    ap.add_argument(
        "--kv-blocks", type=int, default=None, help="each pod's KV blocks (default: the profile's)"
    )
    ap.add_argument("--output-tokens", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        systems = parse_systems(args.systems)
        rates = parse_rates(args.rates)
    except (UnknownSystem, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    overrides = {} if args.output_tokens is None else {"output_tokens": args.output_tokens}
    workload = build(args.workload, seed=args.seed, **overrides)
    content = _content_of(workload)
    engine = {} if args.kv_blocks is None else {"num_gpu_blocks": args.kv_blocks}
    opts = des.DesOptions(profile=args.profile, engine=engine, seed=args.seed)
    results = des.run_des(
        workload,
        systems,
        Ladder(rates, args.duration, seed=args.seed),
        opts,
        progress=False,
        log=lambda _: None,
    )
    held: dict[str, dict[str, set[str]]] = {}
    for rung in results:
        pods_of = held.setdefault(rung.system, {})
        counts = {"first": 0, "warm": 0, "cold": 0}
        per_pod: dict[str, int] = {}
        placed: list[RequestRecord] = sorted((r for r in rung.records if r.endpoint), key=lambda r: r.sent_s)
        for rec in placed:
            assert rec.endpoint is not None
            pods = pods_of.setdefault(content.get(rec.item_id, rec.item_id), set())
            counts["first" if not pods else "warm" if rec.endpoint in pods else "cold"] += 1
            pods.add(rec.endpoint)
            per_pod[rec.endpoint] = per_pod.get(rec.endpoint, 0) + 1
        content_per_pod: dict[str, int] = {}
        for pods in pods_of.values():
            for pod in pods:
                content_per_pod[pod] = content_per_pod.get(pod, 0) + 1
        ttfts = sorted(r.ttft_s for r in rung.records if r.ttft_s is not None)
        requests = list(per_pod.values())
        row = {
            "system": rung.system,
            "rate": rung.rate,
            "kv_blocks": args.kv_blocks,
            "seed": args.seed,
            "ttft_p50_s": _quantile(ttfts, 0.5),
            "ttft_p90_s": _quantile(ttfts, 0.9),
            "prefix_hit_ratio": rung.cache.prefix_hit_ratio,
            "encoder_hit_ratio": rung.cache.encoder_hit_ratio,
            **counts,
            "pods_per_content": statistics.mean(len(p) for p in pods_of.values()) if pods_of else 0.0,
            "content_per_pod_cv": _cv(list(content_per_pod.values())),
            "requests_per_pod_cv": _cv(requests),
            "busiest_pod_over_mean": max(requests) / statistics.mean(requests) if requests else 0.0,
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
