"""How the precise (KV-event) index scales: ``mmgate bench index-scale``.

Four figures, each from the production code path:

- **memory**: an :class:`~mmgate.datalayer.index.memory.AffinityIndex` holding N (endpoint, block)
  entries across 64 endpoints, filled the way KV events fill it (``add`` of 16 keys at a time,
  64-bit block hashes as vLLM publishes them). Each size is built in a fresh process and measured
  as the growth of its resident set (what the machine pays, allocator slack included), and at the
  smallest size also by tracemalloc (what Python objects hold). ``--replication`` sets how many
  endpoints hold each distinct block (1: every entry its own block, the reverse index's worst
  case; 4: common prefixes held by several pods).
- **lookup**: what ``precise-prefix-cache-producer`` does per request for a 16k-token multimodal
  prompt (4 images of 1,024 placeholder tokens in 12k tokens of text): the engine's block keys
  (vLLM's default sha256 over pickled tuples, and xxhash), converted to event integers, then the
  longest-prefix probe of the index, at 8, 64 and 256 endpoints. Every endpoint holds the first
  quarter of the prompt, a quarter of them three quarters, one all of it (a shared system prompt
  and documents: the probe's worst realistic case), beside 4,096 other blocks per endpoint.
- **ingest**: KV-event batches as a pod publishes them (msgpack, one ``BlockStored`` of 16 blocks
  with their token ids and one ``BlockRemoved`` of 16 per batch: a pod under eviction), decoded
  by :func:`mmgate.vllm.kvevents.decode_batch` and applied by
  :func:`mmgate.datalayer.kvevents.apply.apply_batch` on one core: events and blocks per second.
- **redis**: round-trips to a real ``redis-server`` (started on a free loopback port when the
  binary exists) per routing decision recorded in a shared index (``mmgate.sharedIndex``), paced
  and in a burst, read from the mirror's own counters; the request path itself sends none.

Writes the raw figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import random
import shutil
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from mmgate.datalayer.index.memory import AffinityIndex
from mmgate.datalayer.kvevents.apply import apply_batch, tier_bit
from mmgate.request.view import Modality
from mmgate.tokens.sequence import MMItem
from mmgate.vllm.blocks import BlockHash, BlockHasher, event_hash
from mmgate.vllm.kvevents import BlockRemoved, BlockStored, WireFormat, decode_batch, encode_batch
from mmgate_bench.processes import free_port
from mmgate_bench.results import write_json
from mmgate_bench.stats import median

ENDPOINTS = 64
KEYS_PER_EVENT = 16
BLOCK_SIZE = 16
PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _keys(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(64) for _ in range(count)]


def fill(index: AffinityIndex[int], entries: int, endpoints: int, replication: int, seed: int = 0) -> None:
    """``entries`` (endpoint, block) pairs: each distinct block held by ``replication`` endpoints,
    each endpoint's blocks added 16 at a time as BlockStored events carry them."""
    distinct = max(1, entries // replication)
    per_endpoint = entries // endpoints
    keys = _keys(distinct, seed)
    gpu = tier_bit(0, "GPU")
    for e in range(endpoints):
        name = f"10.0.{e // 250}.{e % 250}:8000"
        start = (e // replication) * per_endpoint % distinct  # each run of R endpoints: one set
        for at in range(0, per_endpoint, KEYS_PER_EVENT):
            chunk = [keys[(start + i) % distinct] for i in range(at, min(at + KEYS_PER_EVENT, per_endpoint))]
            index.add(name, chunk, None, gpu)


def _memory_child(entries: int, replication: int, traced: bool, out: Any) -> None:
    """Build one index in this fresh process; report its RSS growth, or (``traced``) what
    tracemalloc counts instead (tracemalloc's own bookkeeping would inflate the RSS)."""
    if traced:
        tracemalloc.start()
    before = _rss()
    index: AffinityIndex[int] = AffinityIndex()
    fill(index, entries, ENDPOINTS, replication)
    grown = _rss() - before
    held = sum(index.size(e) for e in index.endpoints())
    out.put(
        {
            "entries": held,
            "distinct_blocks": len(index),
            "endpoints": len(index.endpoints()),
            "replication": replication,
            "tracemalloc_bytes" if traced else "rss_growth_bytes": (
                tracemalloc.get_traced_memory()[0] if traced else grown
            ),
        }
    )


def _in_child(entries: int, replication: int, traced: bool) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_memory_child, args=(entries, replication, traced, queue))
    child.start()
    row: dict[str, Any] = queue.get()
    child.join()
    return row


def measure_memory(sizes: list[int], replications: list[int]) -> list[dict[str, Any]]:
    """Per size and replication: RSS growth of a fresh process (and, at the smallest size, the
    bytes tracemalloc counts in another one), per entry and per endpoint."""
    rows = []
    for replication in replications:
        for i, entries in enumerate(sizes):
            row = _in_child(entries, replication, traced=False)
            if i == 0:
                row["tracemalloc_bytes"] = _in_child(entries, replication, traced=True)["tracemalloc_bytes"]
            row["bytes_per_entry"] = row["rss_growth_bytes"] / row["entries"]
            row["bytes_per_endpoint"] = row["rss_growth_bytes"] / ENDPOINTS
            rows.append(row)
    return rows


# -- lookup ---------------------------------------------------------------------------------------


def multimodal_prompt(
    tokens: int = 16_384, images: int = 4, image_tokens: int = 1_024
) -> tuple[list[int], list[MMItem]]:
    """Token ids and media spans of a prompt: text, then each image's placeholder run, evenly spread."""
    rng = random.Random(1)
    ids = [rng.randrange(1, 150_000) for _ in range(tokens)]
    items = []
    gap = tokens // images
    for i in range(images):
        offset = i * gap + 256
        identity = f"{i:032x}"
        ids[offset : offset + image_tokens] = [151_655] * image_tokens
        items.append(MMItem(identity, Modality.IMAGE, offset, image_tokens))
    return ids, items


def lookup_case(endpoints: int, algo: str, rounds: int) -> dict[str, Any]:
    ids, items = multimodal_prompt()
    hasher = BlockHasher(algo, BLOCK_SIZE)
    keys = [event_hash(d) for d in hasher.block_hashes(ids, items)]
    index: AffinityIndex[int] = AffinityIndex()
    fill(index, 4_096 * endpoints, endpoints, 1, seed=2)
    names = index.endpoints()
    quarter, three = len(keys) // 4, 3 * len(keys) // 4
    gpu = tier_bit(0, "GPU")
    for i, name in enumerate(names):
        held = keys if i == 0 else keys[:three] if i < max(1, endpoints // 4) else keys[:quarter]
        index.add(name, held, None, gpu)
    hashing, probing = [], []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        digests = hasher.block_hashes(ids, items)
        request_keys = [event_hash(d) for d in digests]
        t1 = time.perf_counter_ns()
        matched = index.longest_prefix(request_keys)
        t2 = time.perf_counter_ns()
        hashing.append((t1 - t0) / 1e3)
        probing.append((t2 - t1) / 1e3)
    assert matched[names[0]] == len(keys)
    return {
        "endpoints": endpoints,
        "hash_algorithm": algo,
        "prompt_tokens": len(ids),
        "blocks": len(keys),
        "endpoints_matching": len(matched),
        "hash_us": median(hashing),
        "probe_us": median(probing),
        "total_us": median([h + p for h, p in zip(hashing, probing, strict=True)]),
    }


# -- ingest ---------------------------------------------------------------------------------------


def event_payloads(batches: int) -> Iterator[bytes]:
    """Batches as a pod under eviction publishes them: 16 blocks stored, 16 older ones removed."""
    rng = random.Random(3)
    recent: list[BlockHash] = []
    for b in range(batches):
        hashes: list[BlockHash] = [rng.getrandbits(64) for _ in range(KEYS_PER_EVENT)]
        tokens = [rng.randrange(1, 150_000) for _ in range(KEYS_PER_EVENT * BLOCK_SIZE)]
        stored = BlockStored(hashes, recent[-1] if recent else None, tokens, BLOCK_SIZE, None, "GPU", None)
        events: list[msgspec.Struct] = [stored]
        if len(recent) >= 4 * KEYS_PER_EVENT:
            events.append(BlockRemoved(recent[:KEYS_PER_EVENT], "GPU"))
            del recent[:KEYS_PER_EVENT]
        recent += hashes
        yield encode_batch(events, WireFormat.CURRENT, float(b), 0)


def measure_ingest(batches: int, rounds: int) -> dict[str, Any]:
    payloads = list(event_payloads(batches))
    events = sum(len(decode_batch(p).events) for p in payloads)
    blocks = sum(len(getattr(e, "block_hashes", ())) for p in payloads for e in decode_batch(p).events)
    seconds = []
    for _ in range(rounds):
        index: AffinityIndex[Hashable] = AffinityIndex()
        t0 = time.perf_counter()
        for payload in payloads:
            apply_batch(index, "10.0.0.1:8000", 0, decode_batch(payload))
        seconds.append(time.perf_counter() - t0)
    best = median(seconds)
    return {
        "batches": batches,
        "events": events,
        "blocks": blocks,
        "payload_bytes": sum(len(p) for p in payloads),
        "seconds_median": best,
        "events_per_s": events / best,
        "blocks_per_s": blocks / best,
        "batches_per_s": batches / best,
    }


# -- redis ----------------------------------------------------------------------------------------


async def _round_trips(url: str, decisions: int, paced_s: float) -> dict[str, Any]:
    from mmgate.datalayer.index.redis_mirror import RedisIndexes, SharedIndexSettings

    namespace = "approx-prefix-cache-producer/bench"
    a, b = RedisIndexes(SharedIndexSettings(url)), RedisIndexes(SharedIndexSettings(url))
    a.index(namespace)
    b.index(namespace)
    await a.start()
    await b.start()
    try:
        while not (a.stats.up and b.stats.up):
            await asyncio.sleep(0.01)
        before_a, before_b = dict(a.stats.round_trips), dict(b.stats.round_trips)
        rng = random.Random(4)
        for d in range(decisions):
            keys = [rng.getrandbits(64) for _ in range(64)]  # a 1k-token prompt's approximate keys
            a.index(namespace).add(f"10.0.0.{d % 8}:8000", keys, 100_000)
            if paced_s:
                await asyncio.sleep(paced_s)
        while a.pending or b.stats.applied < decisions:
            await asyncio.sleep(0.01)
        writes = a.stats.round_trips["write"] - before_a["write"]
        tails = b.stats.round_trips["tail"] - before_b["tail"]
        return {
            "decisions": decisions,
            "paced_ms": paced_s * 1e3,
            "writer_round_trips": writes,
            "reader_round_trips": tails,
            "write_round_trips_per_decision": writes / decisions,
            "tail_round_trips_per_decision": tails / decisions,
            "request_path_round_trips": 0,
        }
    finally:
        await a.stop()
        await b.stop()


def measure_redis(decisions: int) -> dict[str, Any] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mmgate-bench-redis-") as folder:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [*args, "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            url = f"redis://127.0.0.1:{port}/0"
            time.sleep(0.3)
            paced = asyncio.run(_round_trips(url, decisions, 0.002))
            burst = asyncio.run(_round_trips(url, decisions, 0.0))
        finally:
            proc.terminate()
            proc.wait()
    return {"paced": paced, "burst": burst, "kv_event_batch_round_trips": 0}


# -- command --------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000], metavar="N",
        help="index entries (endpoint, block) for the memory figure",
    )  # fmt: skip
    parser.add_argument("--replication", type=int, nargs="+", default=[1, 4], metavar="R")
    parser.add_argument("--endpoints", type=int, nargs="+", default=[8, 64, 256], metavar="E")
    parser.add_argument("--rounds", type=int, default=21, help="timed repeats of each lookup / ingest")
    parser.add_argument("--batches", type=int, default=20_000, help="KV-event batches for the ingest rate")
    parser.add_argument("--decisions", type=int, default=500, help="decisions for the Redis round-trips")
    parser.add_argument("--skip", nargs="*", default=[], choices=["memory", "lookup", "ingest", "redis"])
    parser.add_argument("--out", default="results/index-scale.json")


def run(args: argparse.Namespace) -> int:
    if min(args.sizes + args.replication + args.endpoints + [args.rounds, args.batches, args.decisions]) < 1:
        print("mmgate bench index-scale: every count must be at least 1")
        return 2
    report: dict[str, Any] = {
        "load_average_1m": os.getloadavg()[0],
        "machine": f"{platform.machine()} python {platform.python_version()}, 2 shared cores (noisy)",
    }
    if "memory" not in args.skip:
        report["memory"] = measure_memory(args.sizes, args.replication)
        head = f"{'entries':>12} {'repl':>5} {'distinct':>11} {'RSS growth':>12} {'B/entry':>8}"
        print(head + f" {'MB/endpoint':>12}")
        for r in report["memory"]:
            print(
                f"{r['entries']:>12,} {r['replication']:>5} {r['distinct_blocks']:>11,} "
                f"{r['rss_growth_bytes'] / 2**20:>9.0f} MB {r['bytes_per_entry']:>8.0f} "
                f"{r['bytes_per_endpoint'] / 2**20:>12.1f}"
            )
    if "lookup" not in args.skip:
        report["lookup"] = [
            lookup_case(e, algo, args.rounds) for algo in ("sha256", "xxhash") for e in args.endpoints
        ]
        print(f"\n16k-token prompt, {report['lookup'][0]['blocks']} blocks: µs per request (median)")
        print(f"{'algorithm':>10} {'endpoints':>10} {'hash':>9} {'probe':>9} {'total':>9}")
        for r in report["lookup"]:
            print(
                f"{r['hash_algorithm']:>10} {r['endpoints']:>10} {r['hash_us']:>9.0f} "
                f"{r['probe_us']:>9.0f} {r['total_us']:>9.0f}"
            )
    if "ingest" not in args.skip:
        ing = report["ingest"] = measure_ingest(args.batches, args.rounds)
        print(
            f"\ningest on one core: {ing['events_per_s']:,.0f} events/s, {ing['blocks_per_s']:,.0f} blocks/s "
            f"({ing['batches_per_s']:,.0f} batches/s, decode + apply)"
        )
    if "redis" not in args.skip:
        red = report["redis"] = measure_redis(args.decisions)
        if red is None:
            print("\nredis: skipped (no redis-server binary)")
        else:
            for mode in ("paced", "burst"):
                r = red[mode]
                print(
                    f"\nredis, {mode}: {r['write_round_trips_per_decision']:.3f} writes and "
                    f"{r['tail_round_trips_per_decision']:.3f} tail reads per decision (background); "
                    "0 on the request path"
                )
    out = write_json(Path(args.out), report)
    print(f"\nload average {report['load_average_1m']:.1f}; wrote {out}")
    return 0
