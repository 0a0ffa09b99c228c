"""Open-loop load generation against any OpenAI-compatible URL, with streaming measurements.

Arrivals follow a schedule fixed before the rung starts (constant spacing or a seeded Poisson
process) and do not wait for responses, so an overloaded system builds a queue instead of
slowing the client down, which is what shows a saturation point. Each request streams; the
client stamps the first content chunk (TTFT), every later chunk (ITL) and the end (E2E), and
files failures by type. Bodies are encoded just before their send time (media are rendered
once and cached), so a huge workload never has to sit in memory.

``speedup`` runs a time-scaled simulated fleet: with pods simulating ``s`` times faster than
real time, the client sends ``s`` times the rate for ``1/s`` of the duration and reports every
time multiplied by ``s``, i.e. in the fleet's simulated seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from mmgate_bench.routing.prediction_metrics import difference, scrape_error_buckets
from mmgate_bench.routing.records import CacheCounters, Ladder, RequestRecord, RungResult, arrival_times
from mmgate_bench.routing.stage_counters import FALLBACKS, OUTCOME, REASON, by_prefix, scrape_stage_counters
from mmgate_bench.workloads.media import MediaCache
from mmgate_bench.workloads.synthetic import DEFAULT_MODEL, RawItem, Workload

ENDPOINT_HEADERS = ("x-gateway-destination-endpoint", "x-mmgate-endpoint")


@dataclass(frozen=True, slots=True)
class Target:
    """Where to send: a base URL (``http://host:port``) and the pods whose /metrics hold cache counters."""

    url: str
    pods: tuple[str, ...] = ()
    path: str = "/v1/chat/completions"
    headers: Mapping[str, str] | None = None
    # the processes whose /metrics count the stages' encode decisions and fallbacks (the gateway,
    # and the routing sidecars in sidecar mode; :mod:`mmgate_bench.routing.stage_counters`)
    stage_metrics: tuple[str, ...] = ()


def workload_bodies(
    workload: Workload, model: str = DEFAULT_MODEL, media: MediaCache | None = None
) -> Iterator[tuple[str, bytes]]:
    """(id, body) in the workload's draw order, encoded on demand."""
    cache = media or MediaCache()
    for item in workload.stream():
        yield item.id, orjson.dumps(item.body(cache, model=model))


def raw_bodies(items: Sequence[RawItem]) -> Iterator[tuple[str, bytes]]:
    """Replayed JSONL requests, cycled in file order."""
    while True:
        for item in items:
            yield item.id, item.body_bytes()


async def stream_request(
    session: aiohttp.ClientSession, target: Target, item_id: str, body: bytes, timeout_s: float
) -> RequestRecord:
    """Send one streaming request and time it. Never raises for server or network trouble."""
    start = time.perf_counter()
    rec = RequestRecord(item_id=item_id, sent_s=0.0)
    last: float | None = None
    chunks = 0
    headers = {"content-type": "application/json", **(target.headers or {})}
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(target.url + target.path, data=body, headers=headers) as resp:
                for name in ENDPOINT_HEADERS:
                    if name in resp.headers:
                        rec.endpoint = resp.headers[name]
                if resp.status != 200:
                    await resp.read()
                    rec.error = f"http_{resp.status}"
                    return rec
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    event = orjson.loads(data)
                    if "error" in event:
                        rec.error = "stream_error"
                        return rec
                    usage = event.get("usage")
                    if usage:
                        rec.output_tokens = int(usage.get("completion_tokens") or 0)
                        rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                        details = usage.get("prompt_tokens_details") or {}
                        rec.cached_tokens = int(details.get("cached_tokens") or 0)
                    if _has_content(event):
                        now = time.perf_counter()
                        if last is None:
                            rec.ttft_s = now - start
                        else:
                            rec.itl_s.append(now - last)
                        last = now
                        chunks += 1
    except TimeoutError:
        rec.error = "timeout"
        return rec
    except (aiohttp.ClientConnectorError, ConnectionRefusedError):
        rec.error = "connect"
        return rec
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        rec.error = "disconnect"
        return rec
    except orjson.JSONDecodeError:
        rec.error = "stream_error"
        return rec
    rec.e2e_s = time.perf_counter() - start
    if chunks == 0:
        rec.error = "empty"
    elif rec.output_tokens == 0:
        rec.output_tokens = chunks
    return rec


def _has_content(event: Mapping[str, object]) -> bool:
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    choice = choices[0]
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(delta.get("content") or delta.get("reasoning_content"))
    return bool(choice.get("text"))


async def scrape_cache(session: aiohttp.ClientSession, pods: Sequence[str]) -> CacheCounters:
    """Sum prefix-cache (tokens) and encoder-cache (items) counters over the pods' /metrics."""
    total = CacheCounters()
    for pod in pods:
        try:
            async with session.get(pod.rstrip("/") + "/metrics") as resp:
                text = await resp.text()
        except aiohttp.ClientError:
            continue
        total = total + parse_cache_counters(text)
    return total


def parse_cache_counters(text: str) -> CacheCounters:
    """Cache counters from Prometheus text: vLLM's prefix-cache pair and any encoder-cache pair."""
    c = CacheCounters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith(("_created", "_bucket")):
                continue
            if "prefix_cache_queries" in name and "external" not in name:
                c.prefix_queries += sample.value
            elif "prefix_cache_hits" in name and "external" not in name:
                c.prefix_hits += sample.value
            elif "encoder_cache_queries" in name:
                c.encoder_queries += sample.value
            elif "encoder_cache_hits" in name:
                c.encoder_hits += sample.value
    return c


class RungProgress:
    """A rich progress bar per rung (to stderr); a no-op when quiet. Shared with the DES."""

    def __init__(self, enabled: bool) -> None:
        self.bar: Progress | None = None
        if enabled:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("failed {task.fields[failed]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )

    def __enter__(self) -> RungProgress:
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar:
            self.bar.stop()

    def add(self, label: str, total: int) -> TaskID:
        return self.bar.add_task(label, total=total, failed=0) if self.bar else TaskID(0)

    def done(self, task: TaskID, failed: int) -> None:
        if self.bar:
            self.bar.update(task, advance=1, failed=failed)


async def run_rung(
    session: aiohttp.ClientSession,
    target: Target,
    system: str,
    rate: float,
    duration_s: float,
    bodies: Iterator[tuple[str, bytes]],
    ladder: Ladder,
    progress: RungProgress,
    label: str,
    speedup: float = 1.0,
    seed: int = 0,
) -> RungResult:
    """One rung: send on schedule, then wait for stragglers up to the drain timeout."""
    schedule = arrival_times(rate * speedup, duration_s / speedup, ladder.arrival, seed)
    task = progress.add(label, len(schedule))
    gate = asyncio.Semaphore(ladder.max_concurrency) if ladder.max_concurrency else None
    records: list[RequestRecord] = []
    failed = 0
    before = await scrape_cache(session, target.pods)
    errors_before = await scrape_error_buckets(session, target.url)
    stages_before = await scrape_stage_counters(session, target.stage_metrics)
    t0 = time.perf_counter()
    last_done = t0

    inflight: dict[int, tuple[str, float]] = {}

    async def one(n: int, item_id: str, body: bytes, offset: float) -> None:
        nonlocal failed, last_done
        inflight[n] = (item_id, offset)
        async with gate or contextlib.nullcontext():
            rec = await stream_request(session, target, item_id, body, ladder.request_timeout_s / speedup)
        del inflight[n]
        rec.sent_s = offset
        records.append(rec)
        last_done = max(last_done, time.perf_counter())
        failed += rec.error is not None
        progress.done(task, failed)

    tasks: list[asyncio.Task[None]] = []
    for n, offset in enumerate(schedule):
        item_id, body = next(bodies)
        delay = t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(n, item_id, body, time.perf_counter() - t0)))
    if tasks:
        _done, pending = await asyncio.wait(tasks, timeout=ladder.drain_timeout_s / speedup)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            records.extend(RequestRecord(item_id=i, sent_s=s, error="timeout") for i, s in inflight.values())
            last_done = time.perf_counter()
    after = await scrape_cache(session, target.pods)
    errors = difference(await scrape_error_buckets(session, target.url), errors_before, scale=speedup)
    span = max(last_done - t0, duration_s / speedup)
    stages = await scrape_stage_counters(session, target.stage_metrics)
    stages.subtract(stages_before)
    counted = bool(target.stage_metrics)
    return RungResult(
        system=system,
        rate=rate,
        duration_s=duration_s,
        span_s=span * speedup,
        records=[_scaled(r, speedup) for r in records],
        cache=after - before,
        mode="http",
        prediction_errors=errors or None,
        fallbacks=stages[FALLBACKS] if counted else None,
        encode_outcomes=by_prefix(stages, OUTCOME) if counted else None,
        encode_reasons=by_prefix(stages, REASON) if counted else None,
    )


def _scaled(rec: RequestRecord, s: float) -> RequestRecord:
    if s == 1.0:
        return rec
    rec.sent_s *= s
    rec.ttft_s = rec.ttft_s * s if rec.ttft_s is not None else None
    rec.e2e_s = rec.e2e_s * s if rec.e2e_s is not None else None
    rec.itl_s = [x * s for x in rec.itl_s]
    return rec


async def run_ladder(
    target: Target,
    system: str,
    ladder: Ladder,
    bodies: Iterator[tuple[str, bytes]],
    *,
    speedup: float = 1.0,
    progress: bool = True,
) -> list[RungResult]:
    """Run the warm-up (discarded) and every rung in order against one system."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    results: list[RungResult] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        with RungProgress(progress) as bar:
            for index, rate, duration, warmup in ladder.rungs():
                label = f"{system:<18} {'warm-up' if warmup else 'rate'} {rate:g}/s"
                rung = await run_rung(
                    session, target, system, rate, duration, bodies, ladder, bar, label, speedup,
                    seed=ladder.seed * 1_000 + index,
                )  # fmt: skip
                if not warmup:
                    results.append(rung)
    return results
