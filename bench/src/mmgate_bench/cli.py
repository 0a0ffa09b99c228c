"""``mmgate bench BENCHMARK``: every benchmark of the project behind one command.

The benchmarks live in families (``routing/``, ``overhead/``, ``soak/``, ``micro/``,
``simulator/``); each module exposes a pair of functions, one adding its flags to a parser and one
running it from the parsed flags, and :data:`BENCHMARKS` names them. A benchmark's module is
imported only when it runs, so ``mmgate bench --help`` is fast and a benchmark whose optional
dependency is missing cannot break the others. ``mmgate bench BENCHMARK --help`` shows that
benchmark's own flags.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mmgate.errors import did_you_mean


@dataclass(frozen=True, slots=True)
class Benchmark:
    family: str
    module: str
    summary: str
    add_arguments: str = "add_arguments"
    run: str = "run"


_COMMANDS = "mmgate_bench.routing.commands"

BENCHMARKS: dict[str, Benchmark] = {
    "headline": Benchmark(
        "routing",
        "mmgate_bench.routing.headline",
        "the comparison `make bench` runs: shared-prefix and image-reuse, DES, 8 pods, 5-40 req/s",
    ),
    "run": Benchmark(
        "routing",
        _COMMANDS,
        "one workload over a rate ladder against several systems, over HTTP (or --des)",
        "add_run_arguments",
        "run_ladder",
    ),
    "des": Benchmark(
        "routing",
        _COMMANDS,
        "the same in virtual time: the real scheduler and simulated engines, no HTTP",
        "add_des_arguments",
        "run_ladder",
    ),
    "topologies": Benchmark(
        "routing",
        "mmgate_bench.routing.topologies",
        "aggregated, encoder-DP, E/PD and E/P/D at the same accelerator count, image-heavy and -light",
    ),
    "plot": Benchmark(
        "routing",
        _COMMANDS,
        "redraw report.md and the PNGs from a saved report.json",
        "add_plot_arguments",
        "plot",
    ),
    "compare": Benchmark(
        "routing",
        _COMMANDS,
        "two reports side by side (e.g. HTTP vs DES)",
        "add_compare_arguments",
        "compare",
    ),
    "export": Benchmark(
        "routing",
        _COMMANDS,
        "write a workload as OpenAI chat request JSONL",
        "add_export_arguments",
        "export",
    ),
    "flow-control": Benchmark(
        "routing",
        "mmgate_bench.routing.flow_control",
        "noisy neighbours (DES or --http): no flow control vs global FCFS, round-robin, media-aware fairness",
    ),
    "shared-index": Benchmark(
        "routing", "mmgate_bench.routing.shared_index", "prefix hit ratio: one gateway vs two sharing Redis"
    ),
    "overhead": Benchmark(
        "overhead",
        "mmgate_bench.overhead.harness",
        "latency, throughput, CPU and memory a router adds: mmgate vs direct vs peer routers",
    ),
    "null-server": Benchmark(
        "overhead",
        "mmgate_bench.overhead.nullserver",
        "the overhead benchmark's upstream alone: put a router in front of it by hand (profiling)",
    ),
    "load-client": Benchmark(
        "overhead",
        "mmgate_bench.overhead.client",
        "the overhead benchmark's load client alone: JSON jobs on stdin, JSON results on stdout",
    ),
    "soak": Benchmark(
        "soak", "mmgate_bench.soak.soak", "long mixed load with injected pod faults through the gateway"
    ),
    "idle-streams": Benchmark(
        "soak", "mmgate_bench.soak.idle_streams", "gateway memory per open-but-silent streaming request"
    ),
    "hotpath": Benchmark(
        "micro", "mmgate_bench.micro.hotpath", "the gateway's per-request Python work, per stage, in-process"
    ),
    "upstream-client": Benchmark(
        "micro", "mmgate_bench.micro.upstream_client", "the gateway's upstream HTTP client vs aiohttp"
    ),
    "parse": Benchmark(
        "micro", "mmgate_bench.micro.parse", "parse + probe + identity per body; header probers vs libraries"
    ),
    "flow-overhead": Benchmark(
        "micro",
        "mmgate_bench.micro.flow_control",
        "what flow control adds to a request that is not held: off vs on (FCFS, media-aware)",
    ),
    "decision": Benchmark(
        "micro", "mmgate_bench.micro.decision", "one scheduling decision for a three-image request"
    ),
    "media-load": Benchmark(
        "micro",
        "mmgate_bench.micro.media_load",
        "an API server's base64 decode, content hash and image decode per inline image (sim constants)",
    ),
    "pricing": Benchmark("micro", "mmgate_bench.micro.pricing", "pricing cost per asset under several rules"),
    "tokens": Benchmark(
        "micro", "mmgate_bench.micro.tokens", "token-producer per chat request: pseudo vs engine-exact ids"
    ),
    "index-scale": Benchmark(
        "micro", "mmgate_bench.micro.index_scale", "precise index: memory, lookup, event ingest, Redis trips"
    ),
    "media-uuids": Benchmark(
        "micro", "mmgate_bench.micro.media_uuids", "media uuids in 2/20 MB bodies: splice vs re-serialise"
    ),
    "engine": Benchmark(
        "micro", "mmgate_bench.micro.engine", "simulated requests per wall-clock minute of the engine alone"
    ),
    "engine-caches": Benchmark(
        "micro",
        "mmgate_bench.micro.engine_caches",
        "the reference engine on a 6-turn document chat: stateless vs encoder vs encoder+prefix cache",
    ),
    "loadtest": Benchmark(
        "simulator",
        "mmgate_bench.simulator.loadtest",
        "the simulated fleet through HTTP: calibrate, capacity, metrics",
    ),
}


def _listing() -> str:
    lines = ["benchmarks (mmgate bench BENCHMARK --help for each one's flags):"]
    family = ""
    for name, bench in BENCHMARKS.items():
        if bench.family != family:
            family = bench.family
            lines.append(f"  {family}/")
        lines.append(f"    {name:<16} {bench.summary}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Run one of mmgate's benchmarks; each prints what it compared and writes raw JSON."
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _listing()
    parser.add_argument("benchmark", metavar="BENCHMARK", nargs="?", help="which benchmark (listed below)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own flags")


def command_line() -> str:
    """This run's command as a user would type it again (``mmgate bench ...``), for a report; empty
    when the benchmark was not started from the command line (a test calling it in-process)."""
    argv = sys.argv[1:]
    return "mmgate " + " ".join(argv[argv.index("bench") :]) if "bench" in argv else ""


def run(args: argparse.Namespace) -> int:
    if args.benchmark is None:
        print(f"mmgate bench: name a benchmark\n{_listing()}", file=sys.stderr)
        return 2
    return main([args.benchmark, *args.args])


def main(argv: Sequence[str]) -> int:
    """``mmgate bench`` with ``argv`` (the benchmark's name first)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(_listing())
        return 0
    name, rest = argv[0], list(argv[1:])
    bench = BENCHMARKS.get(name)
    if bench is None:
        hint = did_you_mean(name, BENCHMARKS)
        print(f"mmgate bench: unknown benchmark {name!r}{hint}\n{_listing()}", file=sys.stderr)
        return 2
    # A missing optional dependency (the bench extra) is reported by mmgate.cli with what to install.
    module = importlib.import_module(bench.module)
    parser = argparse.ArgumentParser(prog=f"mmgate bench {name}", description=bench.summary)
    add: Callable[[argparse.ArgumentParser], None] = getattr(module, bench.add_arguments)
    add(parser)
    start: Callable[[argparse.Namespace], int] = getattr(module, bench.run)
    return start(parser.parse_args(rest))
