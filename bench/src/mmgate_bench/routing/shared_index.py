"""One gateway against two sharing one Redis: ``mmgate bench shared-index``.

The question is whether several gateway replicas route a shared-prefix workload as well as one
does (issue 15: the prefix hit ratio within 2 points). Each case gets a fresh simulated fleet
(in this process, on loopback) and its own ``mmgate serve`` processes with the same config
(``examples/shared-index.yaml``: approximate prefix and encoder-cache affinity, token load), and
the same request sequence:

- ``1 gateway``: every request through one gateway;
- ``2 gateways + redis``: requests alternate between two gateways sharing a real ``redis-server``
  (``mmgate.sharedIndex``);
- ``2 gateways, no sharing``: the same two without Redis, each with its own view: what sharing
  buys.

The hit ratio is the pods' own: prompt tokens served from their prefix caches over prompt tokens
(the ``vllm:prefix_cache_hits`` / ``queries`` counters a vLLM pod exports), summed over pods.
Writes the raw figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from mmgate.sim.fleet import SimFleet
from mmgate.sim.profiles import load_profile
from mmgate_bench.processes import Managed, child_env, free_port, wait_until_serving
from mmgate_bench.results import write_json
from mmgate_bench.routing.http_mode import probe_request
from mmgate_bench.routing.loadgen import workload_bodies
from mmgate_bench.routing.systems import EXAMPLES
from mmgate_bench.workloads.media import MediaCache
from mmgate_bench.workloads.synthetic import shared_prefix

CASES = ("1 gateway", "2 gateways + redis", "2 gateways, no sharing")


def gateway_config(urls: list[str], redis_url: str | None, folder: Path) -> Path:
    doc = yaml.safe_load((EXAMPLES / "shared-index.yaml").read_text())
    doc["mmgate"]["endpoints"] = urls
    if redis_url is None:
        doc["mmgate"].pop("sharedIndex", None)
    else:
        doc["mmgate"]["sharedIndex"]["redis"] = redis_url
    path = folder / f"gateway-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def _send(bases: list[str], bodies: list[bytes], concurrency: int) -> tuple[int, int, list[str]]:
    """Every body, request i through gateway i mod len(bases); (ok, failed, endpoint per request)."""
    gate = asyncio.Semaphore(concurrency)
    endpoints = [""] * len(bodies)
    failed = 0

    async def one(i: int, session: aiohttp.ClientSession) -> None:
        nonlocal failed
        async with gate:
            url = bases[i % len(bases)] + "/v1/chat/completions"
            async with session.post(url, data=bodies[i]) as resp:
                await resp.read()
                if resp.status != 200:
                    failed += 1
                endpoints[i] = resp.headers.get("x-mmgate-endpoint", "")

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one(i, session) for i in range(len(bodies))))
    return len(bodies) - failed, failed, endpoints


async def run_case(
    case: str, bodies: list[bytes], groups: list[str], args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    redis: subprocess.Popen[bytes] | None = None
    redis_url = None
    if case == "2 gateways + redis":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        port = free_port()
        redis_url = f"redis://127.0.0.1:{port}/0"
        redis = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    gateways: list[Managed] = []
    async with SimFleet(pods=args.pods, profile=args.profile, time_scale=args.time_scale) as fleet:
        try:
            config = gateway_config(fleet.urls, redis_url, folder)
            for g in range(1 if case == "1 gateway" else 2):
                port = free_port()
                cmd = [sys.executable, "-m", "mmgate", "serve", "--config", str(config), "--port", str(port),
                       "--no-access-log", "--log-level", "warning"]  # fmt: skip
                gw = Managed(
                    f"gateway-{g}", cmd, folder / f"{case.replace(' ', '_')}-{g}.log", env=child_env()
                )
                gw.start()
                gateways.append(gw)
            bases = []
            for gw in gateways:
                port = int(gw.command[gw.command.index("--port") + 1])
                base = f"http://127.0.0.1:{port}"
                why = await asyncio.to_thread(
                    wait_until_serving, base + "/v1/chat/completions", probe_request(fleet.pods[0].model), gw
                )
                if why is not None:
                    raise RuntimeError(f"{gw.name}: {why}\n{gw.log_tail()}")
                bases.append(base)
            if redis_url is not None:
                await asyncio.sleep(1.0)  # both connected and tailing before the first decision
            before = [
                (p.engine.stats().prefix_cache_queries, p.engine.stats().prefix_cache_hits) for p in fleet
            ]
            started = time.perf_counter()
            ok, failed, endpoints = await _send(bases, bodies, args.concurrency)
            seconds = time.perf_counter() - started
            after = [
                (p.engine.stats().prefix_cache_queries, p.engine.stats().prefix_cache_hits) for p in fleet
            ]
        finally:
            for gw in gateways:
                gw.stop()
            if redis is not None:
                redis.terminate()
                redis.wait()
    queries = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    hits = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    first: dict[str, str] = {}
    same = 0
    for group, endpoint in zip(groups, endpoints, strict=True):
        same += first.setdefault(group, endpoint) == endpoint
    return {
        "case": case,
        "requests": len(bodies),
        "ok": ok,
        "failed": failed,
        "seconds": seconds,
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "hit_ratio": hits / queries if queries else 0.0,
        "same_pod_as_group_first": same / len(bodies),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--profile", default="fast", help="sim timing profile of the pods")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="pods' wall seconds per simulated second"
    )
    parser.add_argument("--groups", type=int, default=40, help="shared-prefix groups (distinct prefixes)")
    parser.add_argument("--requests", type=int, default=400, help="requests per case")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each case, interleaved")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/shared-index.json")


def run(args: argparse.Namespace) -> int:
    if min(args.pods, args.groups, args.requests, args.concurrency, args.repeats) < 1:
        print("mmgate bench shared-index: counts must be at least 1")
        return 2
    workload = shared_prefix(
        groups=args.groups, prompts_per_group=5, images=1, width=640, height=480,
        question_tokens=200, system_tokens=400, output_tokens=8, seed=args.seed,
    )  # fmt: skip
    media = MediaCache()
    profile = load_profile(args.profile)
    model = profile.model or profile.name
    drawn = []
    stream = workload_bodies(workload, model=model, media=media)
    by_id = {item.id: item.group for item in workload.items}
    for _ in range(args.requests):
        item_id, body = next(stream)
        drawn.append((by_id[item_id], body))
    groups = [g for g, _ in drawn]
    bodies = [b for _, b in drawn]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mmgate-bench-shared-") as tmp:
        for r in range(args.repeats):
            for case in args.cases:
                folder = Path(tmp) / f"{r}-{CASES.index(case)}"
                folder.mkdir()
                row = asyncio.run(run_case(case, bodies, groups, args, folder))
                row["repeat"] = r
                rows.append(row)
                print(
                    f"{case:<24} hit ratio {row['hit_ratio']:.3f}  same pod as group's first "
                    f"{row['same_pod_as_group_first']:.3f}  ({row['ok']} ok, {row['failed']} failed, "
                    f"{row['seconds']:.1f} s)"
                )
    report = {
        "load_average_1m": os.getloadavg()[0],
        "machine": f"{platform.machine()} python {platform.python_version()}, 2 shared cores (noisy)",
        "workload": workload.params,
        "requests": args.requests,
        "pods": args.pods,
        "profile": args.profile,
        "concurrency": args.concurrency,
        "results": rows,
    }
    out = write_json(args.out, report)
    print(f"wrote {out}")
    return 0
