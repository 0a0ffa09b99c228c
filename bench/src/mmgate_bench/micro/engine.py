"""How many simulated requests per wall-clock minute the engine sustains in virtual time.

A minimal discrete-event loop (Poisson arrivals, least-outstanding routing, N engines) around
:class:`mmgate.sim.core.Engine`, so the engine's own cost can be measured apart from any
scheduler or benchmark harness::

    mmgate bench engine --pods 8 --requests 20000 --rate 40

The workload is the issue's headline one: a shared system prompt, three images of 880 tokens
drawn from a pool (so caches hit sometimes), a short question, 300 output tokens.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import time
from dataclasses import asdict, dataclass

from mmgate.sim.core import Engine, EngineConfig, MediaSpan, SimRequest
from mmgate_bench.results import write_json

SYSTEM = list(range(10, 74))  # 64 shared system-prompt tokens


@dataclass
class BenchResult:
    pods: int
    requests: int
    rate: float
    hash_algo: str
    wall_seconds: float
    cpu_seconds: float
    virtual_seconds: float
    requests_per_wall_minute: float
    requests_per_cpu_minute: float
    steps: int
    mean_ttft: float
    preemptions: int
    prefix_hit_rate: float
    encoder_hit_rate: float


def make_request(
    i: int, rng: random.Random, image_pool: int, image_tokens: int, output_tokens: int
) -> SimRequest:
    ids = list(SYSTEM)
    items = []
    for _ in range(3):
        img = rng.randrange(image_pool)
        items.append(MediaSpan(f"img-{img}", len(ids), image_tokens))
        ids += [200_000 + img] * image_tokens
    ids += [rng.randrange(1000, 50_000) for _ in range(30)]
    return SimRequest(f"req-{i}", ids, items, output_tokens)


def simulate(
    pods: int = 8,
    requests: int = 20_000,
    rate: float = 40.0,
    profile: str = "qwen3-vl-32b-h200-tp2",
    hash_algo: str = "sha256",
    image_pool: int = 2000,
    image_tokens: int = 880,
    output_tokens: int = 300,
    seed: int = 0,
    prefix_caching: bool = True,
) -> BenchResult:
    rng = random.Random(seed)
    config = EngineConfig(prefix_caching_hash_algo=hash_algo, enable_prefix_caching=prefix_caching)
    engines = [Engine(profile, config) for _ in range(pods)]
    outstanding = [0] * pods
    stepping = [False] * pods
    arrival_of: dict[str, float] = {}
    ttft_sum = 0.0
    steps = 0
    # (time, seq, kind, pod, request): kind 0 = arrival, 1 = admission, 2 = step
    heap: list[tuple[float, int, int, int, SimRequest | None]] = []
    seq = 0
    t = 0.0
    for i in range(requests):
        t += rng.expovariate(rate)
        heap.append((t, seq, 0, -1, make_request(i, rng, image_pool, image_tokens, output_tokens)))
        seq += 1
    heapq.heapify(heap)
    now = 0.0
    start = time.perf_counter()
    cpu_start = time.process_time()
    while heap:
        now, _, kind, pod, req = heapq.heappop(heap)
        if kind == 0:
            assert req is not None
            pod = min(range(pods), key=outstanding.__getitem__)
            outstanding[pod] += 1
            arrival_of[req.request_id] = now
            delay = engines[pod].preprocess(req, now)
            heapq.heappush(heap, (now + delay, seq, 1, pod, req))
            seq += 1
        elif kind == 1:
            assert req is not None
            engines[pod].add_request(req, now)
            if not stepping[pod]:
                stepping[pod] = True
                heapq.heappush(heap, (now, seq, 2, pod, None))
                seq += 1
        else:
            engine = engines[pod]
            out = engine.step(now)
            steps += 1
            end = now + out.duration
            for rid in out.first_token:
                ttft_sum += end - arrival_of[rid]
            for fin in out.finished:
                outstanding[pod] -= 1
                del arrival_of[fin.request_id]
            if engine.has_work() and out.duration > 0:
                heapq.heappush(heap, (end, seq, 2, pod, None))
                seq += 1
            else:
                stepping[pod] = False
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    stats = [e.stats() for e in engines]
    pq = sum(s.prefix_cache_queries for s in stats)
    eq = sum(s.encoder_cache_queries for s in stats)
    return BenchResult(
        pods=pods,
        requests=requests,
        rate=rate,
        hash_algo=hash_algo,
        wall_seconds=round(wall, 3),
        cpu_seconds=round(cpu, 3),
        virtual_seconds=round(now, 3),
        requests_per_wall_minute=round(requests / wall * 60),
        requests_per_cpu_minute=round(requests / cpu * 60),
        steps=steps,
        mean_ttft=round(ttft_sum / requests, 4),
        preemptions=sum(s.num_preemptions for s in stats),
        prefix_hit_rate=round(sum(s.prefix_cache_hits for s in stats) / pq, 4) if pq else 0.0,
        encoder_hit_rate=round(sum(s.encoder_cache_hits for s in stats) / eq, 4) if eq else 0.0,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=40.0, help="arrivals per virtual second")
    parser.add_argument("--profile", default="qwen3-vl-32b-h200-tp2")
    parser.add_argument("--hash-algo", default="sha256")
    parser.add_argument("--output-tokens", type=int, default=300)
    parser.add_argument("--no-prefix-caching", action="store_true", help="engines without prefix caching")
    parser.add_argument("--out", help="also write the result as JSON to this file")


def run(args: argparse.Namespace) -> int:
    result = simulate(
        args.pods, args.requests, args.rate, args.profile, args.hash_algo, output_tokens=args.output_tokens
    )
    print(json.dumps(asdict(result), indent=2))
    if args.out:
        write_json(args.out, asdict(result))
    return 0
