"""``mmgate bench flow-control --http``: a scenario over real HTTP, in real time.

For each system a fresh simulated fleet (``mmgate_bench.routing.fleet_proc``: the simulated
engines the DES runs, serving HTTP) and ``mmgate serve`` with the system's config before it, each
in its own process; this process is the clients. The arrivals are the DES's
(:func:`~mmgate_bench.routing.flow_scenarios.plan`): both tenants open-loop, each request sent at
its time whatever is still in flight, so B's flood is a fixed rate (``--overload`` x what the
fleet serves of B), not a number of clients that slows down with the fleet. Requests stream; TTFT
is the time from sending to the first content token. The pods run in real time: the simulator can
scale time, but the gateway's scrape interval and staleness bound would not scale with it, so a
run is shortened by ``--duration`` instead.

Every request ends in an answer or counts as lost (no answer within ``--duration`` +
``--drain``, a dropped connection, an empty stream); a 429 or 503 from the gateway is an answer
and is reported by status. The machine's load falls on the systems only roughly alike (they run
one after the other): the report records the 1-minute load average around each run and how late
the client sent its requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from mmgate_bench.routing.des import tenant_headers
from mmgate_bench.routing.flow_results import compact, report_head, rounded, summary, system_row, tally
from mmgate_bench.routing.flow_scenarios import Plan, Schedule, config_of
from mmgate_bench.routing.http_mode import HttpOptions, start_fleet, start_router
from mmgate_bench.routing.loadgen import Target, stream_request
from mmgate_bench.routing.records import RequestRecord
from mmgate_bench.routing.systems import System
from mmgate_bench.stats import percentile
from mmgate_bench.workloads.media import MediaCache
from mmgate_bench.workloads.synthetic import DEFAULT_MODEL

Send = tuple[float, str, dict[str, str], bytes]  # (offset s, item id, headers, body)


def sends_of(schedule: Schedule, media: MediaCache) -> list[Send]:
    """Each arrival as bytes to send, rendered before the clock starts (an eight-photo body is
    2 MB of base64: rendering it on time would make the client late)."""
    return [
        (t, item.id, tenant_headers(item), orjson.dumps(item.body(media, model=DEFAULT_MODEL)))
        for t, item in schedule
    ]


async def drive(base: str, sends: list[Send], timeout_s: float) -> tuple[list[RequestRecord], float]:
    """Send each request at its offset (open loop); returns every request's record (``sent_s``:
    its scheduled offset) and how late the latest send went out (the client's own lag)."""
    connector = aiohttp.TCPConnector(limit=0)  # no client-side queue: a held request holds a connection
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    targets: dict[tuple[tuple[str, str], ...], Target] = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        late = 0.0

        async def one(offset: float, item_id: str, target: Target, body: bytes) -> RequestRecord:
            rec = await stream_request(session, target, item_id, body, timeout_s - offset)
            rec.sent_s = offset
            return rec

        tasks = []
        for offset, item_id, headers, body in sends:
            key = tuple(sorted(headers.items()))
            target = targets.setdefault(key, Target(base, headers=headers))
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late = max(late, -delay)
            tasks.append(asyncio.create_task(one(offset, item_id, target, body)))
        records = list(await asyncio.gather(*tasks))
    return records, late


def held_times(log: Path) -> dict[str, list[float]]:
    """Per fairness id, how long each request answered 200 was held in the gateway (seconds),
    from the gateway's access log (``held_ms``: only requests under flow control have it)."""
    held: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and str(doc.get("status")) == "200" and "held_ms" in doc:
            held.setdefault(str(doc.get("flow")), []).append(float(doc["held_ms"]) / 1000)
    return held


def run_one(
    opts: HttpOptions,
    config: str,
    sends: list[Send],
    timeout_s: float,
    folder: Path,
    *,
    access_log: bool = False,
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """One system: a fresh fleet and gateway, the sends, both stopped; (records, run facts: with
    ``access_log``, each tenant's held time p50/p90 from the gateway's log)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(config)
    load_before = os.getloadavg()[0]
    fleet, urls = start_fleet(opts, folder)
    try:
        system = System(folder.name, config=path)
        router, base, note = start_router(system, urls, folder, DEFAULT_MODEL, access_log=access_log)
        if router is None:
            raise RuntimeError(note)
        try:
            started = time.perf_counter()
            records, late = asyncio.run(drive(base, sends, timeout_s))
            wall = time.perf_counter() - started
        finally:
            router.stop()
    finally:
        fleet.stop()
    facts = {
        "wall_s": round(wall, 1),
        "client_late_max_s": round(late, 3),
        "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if access_log:
        facts["held_s"] = {
            flow: {"p50": rounded(percentile(times, 50)), "p90": rounded(percentile(times, 90))}
            for flow, times in sorted(held_times(router.log_path).items())
        }
    return records, facts


def run_http(args: argparse.Namespace, scenario: Plan, systems: list[str], folder: Path) -> dict[str, Any]:
    opts = HttpOptions(profile=args.profile, pods=args.pods)
    media = MediaCache(capacity=16)
    print(f"rendering {len(scenario.a)} requests of A and {len(scenario.b)} of B ...")
    a_sends = sends_of(scenario.a, media)
    both = sorted(a_sends + sends_of(scenario.b, media), key=lambda send: send[0])
    timeout_s = args.duration + args.drain
    window = args.duration
    records, facts = run_one(opts, config_of("none", 0), a_sends, timeout_s, folder / "alone")
    alone = tally(records, window)["A"]
    report: dict[str, Any] = {
        **report_head(args, scenario, "http"),
        "drain_s": args.drain,
        "a_alone": {**summary(alone, window, scenario.capacity["A"]), **facts, "requests": compact(records)},
        "systems": {},
    }
    print(f"A alone: TTFT p90 {report['a_alone']['ttft_p90_s']} s ({facts})")
    for name in systems:
        config = config_of(name, args.max_inflight_tokens)
        records, facts = run_one(opts, config, both, timeout_s, folder / name, access_log=args.access_log)
        row = system_row(tally(records, window), window, scenario.capacity)
        report["systems"][name] = {**facts, **row, "requests": compact(records)}
        a, b = row.get("A", {}), row.get("B", {})
        print(
            f"{name:<12} A p90 {a.get('ttft_p90_s')} s, B p90 {b.get('ttft_p90_s')} s, goodput "
            f"{row['goodput']}, refused A {a.get('refused')} B {b.get('refused')}, lost A "
            f"{a.get('lost')} B {b.get('lost')} ({facts})"
        )
    return report
