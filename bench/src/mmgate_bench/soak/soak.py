"""Soak: long mixed load with injected faults through the gateway on a simulated fleet.

Run as ``mmgate bench soak --duration 1800 --out results/soak``. It starts ``--pods``
simulated pods (one ``mmgate sim`` process each, so one can be killed and restarted) and one
``mmgate serve`` process in front of them, then sends open-loop Poisson traffic (streaming and
not, text and images, a few malformed bodies and clients that hang up mid-stream) while a fault
schedule cycles through 429/500/503 bursts, connection resets, stalls, slow pods and a killed
pod. Every request is filed by outcome; the gateway's RSS is sampled every few seconds.

Writes ``soak.json`` (every request, RSS samples, the fault log) and ``soak.png`` (p99 latency
and RSS over time). Deliberately modest in CPU: a few requests per second on a ``fast`` fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import orjson

from mmgate_bench.processes import free_port
from mmgate_bench.procstat import rss_mb
from mmgate_bench.results import write_json
from mmgate_bench.stats import percentiles

MODEL = "test"


@dataclass(slots=True)
class Record:
    t: float  # seconds since the start, at send time
    kind: str  # text | image | stream | bad | hangup
    outcome: str  # ok | cut | hangup | http_<status>_<code> | client_timeout | client_error
    latency_s: float
    endpoint: str = ""


def tiny_png(seed: int) -> str:
    from PIL import Image

    image = Image.new("RGB", (64 + seed % 200, 48 + seed % 150), (seed % 256, (seed * 7) % 256, 90))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


class Fleet:
    """One ``mmgate sim`` process per pod, so a pod can be killed and brought back."""

    def __init__(self, pods: int, time_scale: float) -> None:
        self.ports = [free_port() for _ in range(pods)]
        self.time_scale = time_scale
        self.procs: dict[int, asyncio.subprocess.Process] = {}

    async def start_pod(self, port: int) -> None:
        self.procs[port] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mmgate", "sim", "--profile", "fast", "--pods", "1",
            "--base-port", str(port), "--time-scale", str(self.time_scale), "--model", MODEL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def kill(self, port: int) -> None:
        proc = self.procs.pop(port, None)
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()

    async def stop(self) -> None:
        for port in list(self.procs):
            await self.kill(port)


async def wait_http(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url) as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.records: list[Record] = []
        self.rss: list[tuple[float, float]] = []
        self.faults: list[tuple[float, str]] = []
        self.start = 0.0
        self.images = [tiny_png(k) for k in range(40)]

    def now(self) -> float:
        return time.monotonic() - self.start

    def body(self, kind: str, k: int) -> bytes:
        content: list[dict[str, object]] = [{"type": "text", "text": f"request {k}: describe it"}]
        if kind == "image":
            content.append({"type": "image_url", "image_url": {"url": self.rng.choice(self.images)}})
        if kind == "bad":
            return self.rng.choice(
                [
                    b'{"model": "test", "messages": [',
                    b"[]",
                    b'{"model":"test","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,!!"}}]}]}',
                ]
            )
        doc = {
            "model": MODEL,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": self.rng.randint(4, 40),
            "stream": kind in ("stream", "hangup"),
        }
        return orjson.dumps(doc)

    async def one(self, session: aiohttp.ClientSession, url: str, kind: str, k: int) -> None:
        sent = self.now()
        outcome = "ok"
        endpoint = ""
        try:
            async with asyncio.timeout(self.args.client_timeout):
                async with session.post(url + "/v1/chat/completions", data=self.body(kind, k)) as resp:
                    endpoint = resp.headers.get("x-mmgate-endpoint", "")
                    if resp.status != 200:
                        data = await resp.read()
                        code = ""
                        with contextlib.suppress(Exception):
                            code = orjson.loads(data)["error"]["code"] or ""
                        outcome = f"http_{resp.status}_{code}".rstrip("_")
                    elif kind == "hangup":
                        await resp.content.readany()
                        outcome = "hangup"  # the client leaves after the first chunk
                    else:
                        data = await resp.read()
                        if kind == "stream" and not data.endswith(b"data: [DONE]\n\n"):
                            outcome = "cut"
        except TimeoutError:
            outcome = "client_timeout"
        except aiohttp.ClientPayloadError:
            outcome = "cut"
        except (aiohttp.ClientError, OSError) as exc:
            outcome = f"client_error_{type(exc).__name__}"
        self.records.append(Record(round(sent, 3), kind, outcome, round(self.now() - sent, 4), endpoint))

    async def load(self, session: aiohttp.ClientSession, url: str, until: float) -> None:
        kinds = ["text", "image", "stream", "stream", "image", "bad", "hangup"]
        weights = [30, 25, 25, 10, 5, 3, 2]
        tasks: set[asyncio.Task[None]] = set()
        k = 0
        next_at = self.now()
        while self.now() < until:
            next_at += self.rng.expovariate(self.args.rate)
            await asyncio.sleep(max(0.0, next_at - self.now()))
            kind = self.rng.choices(kinds, weights)[0]
            task = asyncio.create_task(self.one(session, url, kind, k))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            k += 1
        if tasks:
            await asyncio.gather(*tasks)

    async def faults_loop(self, session: aiohttp.ClientSession, fleet: Fleet, until: float) -> None:
        """Every ``--fault-period`` seconds, one fault on one pod for a while, then clear it."""
        pods = fleet.ports
        plan: list[tuple[str, dict[str, object]]] = [
            ("429 burst", {"rate_429": 1.0}),
            ("500 burst", {"rate_500": 1.0}),
            ("503 burst", {"rate_503": 1.0}),
            ("resets 30%", {"rate_reset": 0.3}),
            ("stall 4s", {"stall_for": 4.0}),
            ("slow x5", {"slowdown": 5.0}),
            ("kill + restart", {}),
            ("mixed 10% errors", {"rate_429": 0.05, "rate_500": 0.05}),
        ]
        clear = {"rate_429": 0.0, "rate_500": 0.0, "rate_503": 0.0, "rate_reset": 0.0, "slowdown": 1.0}
        step = 0
        period = self.args.fault_period
        while self.now() + period < until:
            await asyncio.sleep(period / 2)
            name, change = plan[step % len(plan)]
            port = pods[step % len(pods)]
            step += 1
            self.faults.append((round(self.now(), 1), f"pod :{port}: {name}"))
            if not change:
                await fleet.kill(port)
                await asyncio.sleep(period / 4)
                await fleet.start_pod(port)
                await wait_http(session, f"http://127.0.0.1:{port}/health")
                self.faults.append((round(self.now(), 1), f"pod :{port}: back"))
                await asyncio.sleep(period / 4)
                continue
            with contextlib.suppress(aiohttp.ClientError, OSError):
                await session.post(f"http://127.0.0.1:{port}/admin/faults", json=change)
            await asyncio.sleep(period / 2)
            with contextlib.suppress(aiohttp.ClientError, OSError):
                await session.post(f"http://127.0.0.1:{port}/admin/faults", json=clear)
            self.faults.append((round(self.now(), 1), f"pod :{port}: cleared"))

    async def sample_rss(self, pid: int, until: float) -> None:
        while self.now() < until:
            with contextlib.suppress(OSError):
                self.rss.append((round(self.now(), 1), round(rss_mb([pid]), 1)))
            await asyncio.sleep(self.args.sample_every)

    async def run(self) -> dict[str, object]:
        args = self.args
        fleet = Fleet(args.pods, args.time_scale)
        for port in fleet.ports:
            await fleet.start_pod(port)
        gw_port = free_port()
        config = Path(args.out) / "soak-gateway.yaml"
        config.write_text(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nmmgate:\n"
            "  readTimeoutS: 2.0\n  bodyTimeoutS: 10.0\n"
            "  admission: {maxInflight: 200, maxQueue: 100, queueTimeoutS: 5.0}\n"
        )
        endpoints = ",".join(f"127.0.0.1:{p}" for p in fleet.ports)
        gateway = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mmgate", "serve", "--config", str(config), "--endpoints", endpoints,
            "--port", str(gw_port), "--no-access-log", "--log-level", "warning",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{gw_port}"
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            try:
                for port in fleet.ports:
                    await wait_http(session, f"http://127.0.0.1:{port}/health")
                await wait_http(session, url + "/ready")
                self.start = time.monotonic()
                until = float(args.duration)
                await asyncio.gather(
                    self.load(session, url, until),
                    self.faults_loop(session, fleet, until),
                    self.sample_rss(gateway.pid, until),
                )
                async with session.get(url + "/metrics") as resp:
                    gateway_metrics = await resp.text()
            finally:
                if gateway.returncode is None:
                    gateway.terminate()
                    await gateway.wait()
                await fleet.stop()
        return {
            "duration_s": args.duration,
            "rate": args.rate,
            "pods": args.pods,
            "records": [asdict(r) for r in self.records],
            "rss_mb": self.rss,
            "faults": self.faults,
            "gateway_retries": [
                ln for ln in gateway_metrics.splitlines() if ln.startswith("mmgate_retries_total{")
            ],
        }


def summarize(result: dict[str, object]) -> dict[str, object]:
    records = result["records"]
    assert isinstance(records, list)
    by_outcome = Counter(r["outcome"] for r in records)
    by_kind = Counter(r["kind"] for r in records)
    minute: dict[int, list[float]] = {}
    for r in records:
        if r["outcome"] == "ok":
            minute.setdefault(int(r["t"] // 60), []).append(r["latency_s"])
    p50: dict[int, float] = {}
    p99: dict[int, float] = {}
    for m, latencies in sorted(minute.items()):
        low, high = percentiles(latencies, (50, 99))
        assert low is not None and high is not None  # a minute is listed only once it has a latency
        p50[m], p99[m] = round(low, 4), round(high, 4)
    rss = result["rss_mb"]
    assert isinstance(rss, list)
    return {
        "requests": len(records),
        "by_outcome": dict(by_outcome.most_common()),
        "by_kind": dict(by_kind),
        "p50_by_minute_s": p50,
        "p99_by_minute_s": p99,
        "rss_first_mb": rss[0][1] if rss else None,
        "rss_max_mb": max(v for _, v in rss) if rss else None,
        "rss_last_mb": rss[-1][1] if rss else None,
    }


def plot(result: dict[str, object], summary: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    p99 = summary["p99_by_minute_s"]
    p50 = summary["p50_by_minute_s"]
    assert isinstance(p99, dict) and isinstance(p50, dict)
    ax1.plot([m + 0.5 for m in p99], [v * 1000 for v in p99.values()], marker="o", label="p99")
    ax1.plot([m + 0.5 for m in p50], [v * 1000 for v in p50.values()], marker=".", label="p50")
    ax1.set_ylabel("latency of served requests (ms)")
    ax1.legend()
    ax1.grid(alpha=0.3)
    rss = result["rss_mb"]
    assert isinstance(rss, list)
    ax2.plot([t / 60 for t, _ in rss], [v for _, v in rss])
    ax2.set_ylabel("gateway RSS (MB)")
    ax2.set_xlabel("minutes")
    ax2.grid(alpha=0.3)
    fig.suptitle("mmgate soak: mixed load with injected faults (shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of load (default 1800)")
    parser.add_argument("--rate", type=float, default=6.0, help="requests per second, Poisson (default 6)")
    parser.add_argument("--pods", type=int, default=3, help="simulated pods (default 3)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="sim time scale (default 1)")
    parser.add_argument(
        "--fault-period", type=float, default=40.0, help="seconds per fault cycle (default 40)"
    )
    parser.add_argument("--client-timeout", type=float, default=30.0, help="per-request client timeout")
    parser.add_argument("--sample-every", type=float, default=5.0, help="RSS sampling period (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="results/soak", help="output folder (soak.json, soak.png)")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(Soak(args).run())
    summary = summarize(result)
    result["summary"] = summary
    write_json(out / "soak.json", result)
    plot(result, summary, out / "soak.png")
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
    print(f"wrote {out / 'soak.json'}, {out / 'soak.png'}")
    return 0
