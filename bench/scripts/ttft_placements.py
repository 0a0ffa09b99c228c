"""Where a DES ladder's placements went: cold placements, and how evenly content is partitioned.

The experiment behind docs/benchmarks/predicted-ttft.md's shared-prefix section. For each system
and rung it counts, in send order, a request's *first* placement of its content (no pod has had
it), *warm* ones (the pod has had it) and *cold* ones (another pod has had it: a copy), and how
evenly the content and the requests spread over the pods (coefficient of variation, busiest pod
over the mean). Content is a shared-prefix group, a multi-turn conversation, or a request's
group label elsewhere (an image-reuse photo).

It also follows each content's *last* pod (where its previous request went): how many requests of
content already placed went back there and how many were *moved* to another pod, with the requests
in flight (sent, no first token yet) on the last pod and on the chosen one at each move — what a
scorer weighed when it sent a conversation's turn away from its history — and each pod's own
prefix-hit ratio (cached over prompt tokens of the requests it served).

    python bench/scripts/ttft_placements.py --systems aggregated,predicted-ttft \\
        --workload shared-prefix --rates 10,20,30,40 --duration 100 [--kv-blocks 400000]
    python bench/scripts/ttft_placements.py --systems aggregated,predicted-ttft \\
        --workload multi-turn-document --conversations 397 --kv-blocks 10000 --rates 5,10,15,20

One JSON object per rung on stdout (also the TTFT p90 and the fleet's prefix-cache hit ratio).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from mmgate_bench.routing import des
from mmgate_bench.routing.records import Ladder, RequestRecord, parse_rates
from mmgate_bench.routing.systems import UnknownSystem, parse_systems
from mmgate_bench.stats import percentile
from mmgate_bench.workloads.synthetic import Workload, build


def _content_of(workload: Workload) -> dict[str, str]:
    """Each work item's content key: its prefix group (shared-prefix), else its group label."""
    return {item.id: item.group or item.id for item in workload.items}


def _cv(values: list[int]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) if values else 0.0


def _in_flight(records: list[RequestRecord], at: float) -> float:
    """Requests sent to a pod before ``at`` whose first token came after it."""
    return float(
        sum(1 for r in records if r.sent_s < at and r.ttft_s is not None and r.sent_s + r.ttft_s > at)
    )


def _hit_ratio(records: list[RequestRecord]) -> float:
    prompt = sum(r.prompt_tokens for r in records)
    return round(sum(r.cached_tokens for r in records) / prompt, 4) if prompt else 0.0


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
    ap.add_argument("--conversations", type=int, default=None, help="multi-turn-document's conversations")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        systems = parse_systems(args.systems)
        rates = parse_rates(args.rates)
    except (UnknownSystem, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    overrides: dict[str, int] = {}
    if args.output_tokens is not None:
        overrides["output_tokens"] = args.output_tokens
    if args.conversations is not None:
        overrides["conversations"] = args.conversations
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
    last: dict[str, dict[str, str]] = {}
    for rung in results:
        pods_of = held.setdefault(rung.system, {})
        last_pod = last.setdefault(rung.system, {})
        counts = {"first": 0, "warm": 0, "cold": 0, "to_last_pod": 0, "moved": 0}
        per_pod: dict[str, int] = {}
        served: dict[str, list[RequestRecord]] = {}
        ahead_last: list[float] = []
        ahead_chosen: list[float] = []
        placed: list[RequestRecord] = sorted((r for r in rung.records if r.endpoint), key=lambda r: r.sent_s)
        for rec in placed:
            assert rec.endpoint is not None
            key = content.get(rec.item_id, rec.item_id)
            pods = pods_of.setdefault(key, set())
            counts["first" if not pods else "warm" if rec.endpoint in pods else "cold"] += 1
            pods.add(rec.endpoint)
            before = last_pod.get(key)
            if before == rec.endpoint:
                counts["to_last_pod"] += 1
            elif before is not None:
                counts["moved"] += 1
                ahead_last.append(_in_flight(served.get(before, []), rec.sent_s))
                ahead_chosen.append(_in_flight(served.get(rec.endpoint, []), rec.sent_s))
            last_pod[key] = rec.endpoint
            served.setdefault(rec.endpoint, []).append(rec)
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
            "ttft_p50_s": percentile(ttfts, 50),
            "ttft_p90_s": percentile(ttfts, 90),
            "prefix_hit_ratio": rung.cache.prefix_hit_ratio,
            "encoder_hit_ratio": rung.cache.encoder_hit_ratio,
            **counts,
            "pods_per_content": statistics.mean(len(p) for p in pods_of.values()) if pods_of else 0.0,
            "content_per_pod_cv": _cv(list(content_per_pod.values())),
            "requests_per_pod_cv": _cv(requests),
            "busiest_pod_over_mean": max(requests) / statistics.mean(requests) if requests else 0.0,
            "content_per_pod": [content_per_pod[p] for p in sorted(content_per_pod)],
            "in_flight_on_last_pod_when_moved_p50": percentile(ahead_last, 50),
            "in_flight_on_chosen_pod_when_moved_p50": percentile(ahead_chosen, 50),
            "prefix_hit_ratio_per_pod": [_hit_ratio(served[p]) for p in sorted(served)],
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
