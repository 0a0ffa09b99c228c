"""``mmgate bench flow-control --http``: the light-victim scenario over real HTTP, reduced.

``mmgate serve`` (each system's config, as :mod:`~mmgate_bench.routing.flow_control` writes it)
in front of ``mmgate sim`` pods, both in their own processes; this process is the clients: tenant
A open-loop (one 448x336 image, streamed, at ``--a-rate``), tenant B ``--b-clients`` closed-loop
clients of eight 1280x720 photos each, for ``--duration`` seconds. Every image is new. TTFT is
the time to the first streamed byte. The machine's load falls on every system alike only roughly
(they run one after the other): read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from mmgate_bench.routing.flow_scenarios import config_of, heavy, light
from mmgate_bench.routing.http_mode import HttpOptions, start_fleet, start_router
from mmgate_bench.routing.systems import System
from mmgate_bench.stats import percentile
from mmgate_bench.workloads.media import MediaCache
from mmgate_bench.workloads.synthetic import DEFAULT_MODEL, WorkItem


@dataclass
class Sample:
    tenant: str
    status: int
    ttft_s: float | None
    sent_s: float
    e2e_s: float


@dataclass
class Client:
    base: str
    session: aiohttp.ClientSession
    start: float
    samples: list[Sample] = field(default_factory=list)

    async def send(self, tenant: str, body: bytes) -> None:
        sent = time.perf_counter()
        headers = {"Content-Type": "application/json", "x-gateway-inference-fairness-id": tenant}
        ttft = None
        try:
            async with self.session.post(
                self.base + "/v1/chat/completions", data=body, headers=headers
            ) as resp:
                async for chunk in resp.content.iter_any():
                    if chunk and ttft is None:
                        ttft = time.perf_counter() - sent
                status = resp.status
        except aiohttp.ClientError:
            status = 0
        now = time.perf_counter()
        self.samples.append(
            Sample(tenant, status, ttft if status == 200 else None, sent - self.start, now - sent)
        )


def bodies(items: list[WorkItem], media: MediaCache) -> list[bytes]:
    return [json.dumps(item.body(media, model=DEFAULT_MODEL, stream=True)).encode() for item in items]


async def drive(
    base: str, a: list[bytes], b: list[bytes], a_rate: float, clients: int, duration: float
) -> list[Sample]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        client = Client(base, session, time.perf_counter())
        b_next = iter(b)

        async def heavy_client() -> None:
            while time.perf_counter() - client.start < duration:
                body = next(b_next, None)
                if body is None:
                    return
                await client.send("B", body)

        async def light_stream() -> None:
            tasks = []
            for i, body in enumerate(a):
                delay = client.start + i / a_rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(client.send("A", body)))
            await asyncio.gather(*tasks)

        await asyncio.gather(light_stream(), *(heavy_client() for _ in range(clients)))
        return client.samples


def summary(samples: list[Sample], tenant: str, duration: float) -> dict[str, Any]:
    mine = [s for s in samples if s.tenant == tenant]
    ok = [s.ttft_s for s in mine if s.ttft_s is not None]
    p90 = percentile(ok, 90)
    return {
        "sent": len(mine),
        "ok": len(ok),
        "errors": sorted({s.status for s in mine if s.status != 200}),
        "served_rps": round(
            sum(1 for s in mine if s.status == 200 and s.sent_s + s.e2e_s <= duration) / duration, 3
        ),
        "ttft_p50_s": round(statistics.median(ok), 3) if ok else None,
        "ttft_p90_s": round(p90, 3) if p90 is not None else None,
    }


def run_http(args: argparse.Namespace, systems: list[str]) -> int:
    opts = HttpOptions(profile=args.profile, pods=args.pods)
    rng = random.Random(0)
    n_a = int(args.a_rate * args.duration)
    n_b = int(4 * args.duration) + args.b_clients  # more than two H200 pods serve of B in the time
    media = MediaCache(capacity=16)
    print(f"rendering {n_a} light and {n_b} eight-photo bodies ...")
    a_items = [light(i, rng) for i in range(n_a)]
    b_items = [heavy(i, rng, 8) for i in range(n_b)]
    a_bodies, b_bodies = bodies(a_items, media), bodies(b_items, media)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs = [("alone", "none", False), *((name, name, True) for name in systems)]
        for label, name, flood in runs:
            fleet, urls = start_fleet(opts, folder / label)
            try:
                path = folder / f"{label}.yaml"
                path.write_text(config_of(name, args.max_inflight_tokens))
                router, base, note = start_router(
                    System(name, config=path), urls, folder / label, DEFAULT_MODEL
                )
                if router is None:
                    print(note)
                    continue
                try:
                    samples = asyncio.run(
                        drive(
                            base,
                            a_bodies,
                            b_bodies if flood else [],
                            args.a_rate,
                            args.b_clients,
                            args.duration,
                        )
                    )
                finally:
                    router.stop()
            finally:
                fleet.stop()
            rows[label] = {
                "A": summary(samples, "A", args.duration),
                "B": summary(samples, "B", args.duration),
            }
            a = rows[label]["A"]
            b = rows[label]["B"]
            print(
                f"{label:<12} A TTFT p50 {a['ttft_p50_s']} s p90 {a['ttft_p90_s']} s, "
                f"A ok {a['ok']}/{a['sent']}, B served {b['served_rps']}/s"
            )
    report = {
        "mode": "http",
        "scenario": "light-victim",
        "profile": args.profile,
        "pods": args.pods,
        "duration_s": args.duration,
        "a_rate": args.a_rate,
        "b_clients": args.b_clients,
        "max_inflight_tokens": args.max_inflight_tokens,
        "systems": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0
