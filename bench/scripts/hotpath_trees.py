"""The gateway's whole per-request hot path, compared across checkouts in one alternating run.

``mmgate bench hotpath`` times one tree's stages. This driver times the whole bill (every stage:
the last column of that benchmark) of several trees *in turns*, so a change in the shared
machine's load hits them alike, with the same clock for each: the process's CPU time around a
loop of requests (``time.process_time``; inside the loop each tree keeps its own code, so no tree
pays a slower clock call than the other). Every tree is run with its own copy of the benchmark
module, through its public ``build``, ``request_loop``, ``body`` and ``BODIES``::

    python bench/scripts/hotpath_trees.py --rounds 8 --json docs/benchmarks/hotpath-tracing.json \\
        before=/tmp/before/src  off=src  on=src:+tracing

A tree is ``NAME=SRC[:MODULE][:+tracing[=RATIO]]``: the tree's product ``src`` folder, run with
the benchmarks' ``bench/src`` beside it (module default ``mmgate_bench.micro.hotpath``; a checkout
from before the benchmarks had their own distribution has no ``bench/src`` and defaults to
``mmgate.bench.micro.hotpath``, its own copy;
``+tracing`` builds the gateway with tracing on, spans exported to a local sink and flushed inside
the timed loop). Each round runs every tree once, in a fresh process, in a rotating order; the
figure per tree and case is the median over the rounds of each round's median over ``--repeats``.
``--calls`` also counts Python and C function calls per request (``sys.setprofile``: the same for
every run of a tree, whatever the load). ``--instructions N`` instead counts the machine
instructions of N requests per case under ``valgrind --tool=callgrind`` (one run per tree, no
timing): callgrind dumps its counters at each call of ``time.thread_time_ns``, which the worker
makes just before and just after each case's loop, so the dump between them is the loop alone.
Unlike CPU time, that count does not move with the shared machine's load (it leaves out cache
misses and the kernel's share, such as ``os.urandom``'s system call)::

    python bench/scripts/hotpath_trees.py --instructions 300 --bodies text \\
        base=/tmp/base/src now=src
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DEFAULT_MODULE = "mmgate_bench.micro.hotpath"
OLD_MODULE = "mmgate.bench.micro.hotpath"  # a checkout where the benchmarks were still inside mmgate


def tree_path(src: str) -> str:
    """The ``PYTHONPATH`` of a tree: its ``src`` and, when the checkout has one, its ``bench/src``."""
    bench = Path(src).parent / "bench" / "src"
    return os.pathsep.join([src, str(bench)]) if bench.is_dir() else src


def default_module(src: str) -> str:
    """The tree's own copy of the benchmark module (where it lives depends on the checkout's age)."""
    return DEFAULT_MODULE if (Path(src).parent / "bench" / "src").is_dir() else OLD_MODULE


CASES = [
    ("round-robin", "text"),
    ("aggregated", "text"),
    ("round-robin", "image-3"),
    ("aggregated", "image-3"),
]


def parse_tree(text: str) -> dict[str, Any]:
    name, _, rest = text.partition("=")
    if not name or not rest:
        raise SystemExit(f"hotpath_trees: a tree is NAME=SRC[:MODULE][:+tracing[=RATIO]], not {text!r}")
    parts = rest.split(":")
    src = str(Path(parts[0]).resolve())
    tree: dict[str, Any] = {"name": name, "src": src, "module": default_module(src)}
    for part in parts[1:]:
        if part.startswith("+tracing"):
            ratio = part.partition("=")[2]
            tree["tracing"] = float(ratio) if ratio else 1.0
        else:
            tree["module"] = part
    return tree


# -- one tree in its own process ----------------------------------------------------------------

_NO_GAUGE = SimpleNamespace(inc=int, dec=int)  # int() returns at once: nothing counted


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs inside the tree's process: every case, ``repeats`` timed loops each."""
    import gc
    import importlib

    from mmgate.datalayer.metrics import MetricsSnapshot

    hotpath = importlib.import_module(spec["module"])
    sink = None
    collector = None
    if spec.get("tracing") is not None:
        os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "4000000")  # no span dropped for want of room
        sink = hotpath.otlp_sink()
        collector = f"http://127.0.0.1:{sink.server_address[1]}"
    out: dict[str, Any] = {}
    for config, body_name in spec["cases"]:
        if collector is not None:
            gateway = hotpath.build(config, collector, spec["tracing"])
        else:
            gateway = hotpath.build(config)
        # The gateway reads its in-flight gauge from the admission slots at scrape time (since
        # before 221308c); older copies of the benchmark still moved it on every request. Every
        # tree gets a gauge whose inc/dec are C no-ops, so none is timed for work its gateway
        # does not do.
        gateway.telemetry.inflight = _NO_GAUGE
        flush = gateway.tracing.flush if getattr(gateway, "tracing", None) is not None else None
        data = hotpath.body(hotpath.BODIES[body_name])
        n = spec["iterations"] if len(data) < 100_000 else max(20, spec["iterations"] // 10)
        if flush is not None:
            n = max(20, n // 4)  # a traced request costs ~10x: the same loop length in time
        run = hotpath.request_loop(gateway, data, len(hotpath.STAGES) - 1)

        def refresh(gateway: Any = gateway) -> None:
            now = gateway.clock()
            for i, record in enumerate(gateway.data.registry.records()):
                record.metrics = MetricsSnapshot(
                    engine="vllm", waiting=float(i), running=4.0, kv_usage=0.2 + 0.1 * i,
                    block_size=16, num_gpu_blocks=10_000, scraped_at=now,
                )  # fmt: skip

        refresh()
        run(max(1, n // 10))  # warm up
        if spec.get("instructions"):
            n = spec["instructions"]
            refresh()
            gc.collect()
            gc.disable()  # a collection would land in one case's count by chance
            time.thread_time_ns()  # callgrind dumps here ...
            run(n)
            time.thread_time_ns()  # ... and here: the dump in between is the loop
            gc.enable()
            out[f"{config} × {body_name}"] = {"iterations": n}
            continue
        samples = []
        for _ in range(spec["repeats"]):
            refresh()
            gc.collect()
            start = time.process_time()
            run(n)
            if flush is not None:
                flush()
            samples.append((time.process_time() - start) / n * 1e6)
        result: dict[str, Any] = {"iterations": n, "samples_us": [round(s, 2) for s in samples]}
        if spec["calls"]:
            result["calls_per_request"] = count_calls(run, refresh, flush)
        if flush is not None:
            gateway.tracing.shutdown()
        out[f"{config} × {body_name}"] = result
    if sink is not None:
        sink.shutdown()
    return out


def calls_per_request(run: Any, requests: int) -> float:
    """Function calls (Python and C) per request over ``requests`` requests, this thread only
    (``sys.setprofile``: exact, whatever the machine's load)."""
    calls = 0

    def profiler(_frame: Any, event: str, _arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(profiler)
    try:
        run(requests)
    finally:
        sys.setprofile(None)
    return round(calls / requests, 1)


def count_calls(run: Any, refresh: Any, flush: Any) -> float:
    """Function calls per request over 200 requests, on fresh scrapes."""
    refresh()
    calls = calls_per_request(run, 200)
    if flush is not None:
        flush()
    return calls


# -- the rounds ---------------------------------------------------------------------------------


def run_tree(tree: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    spec = {
        "module": tree["module"],
        "tracing": tree.get("tracing"),
        "cases": [list(c) for c in CASES if c[1] in args.bodies],
        "iterations": args.iterations,
        "repeats": args.repeats,
        "calls": args.calls,
    }
    env = dict(os.environ, PYTHONPATH=tree_path(tree["src"]))
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    with tempfile.TemporaryDirectory() as folder:
        if args.instructions:
            spec["instructions"] = args.instructions
            command[-1] = json.dumps(spec)
            out_file = Path(folder) / "cg.out"
            command = [
                "valgrind", "--tool=callgrind", "--dump-before=time_thread_time_ns",
                f"--callgrind-out-file={out_file}", *command,
            ]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"hotpath_trees: {tree['name']} failed:\n{done.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if args.instructions:
            # Dumps 1, 2, ...: before the first marker, then between markers; case k's loop is
            # dump 2k (its warm-up and the next case's build fall in the odd ones).
            for k, case in enumerate(result.values(), start=1):
                total = _callgrind_total(Path(f"{out_file}.{2 * k}"))
                case["instructions_per_request"] = round(total / case["iterations"])
    return result


def _callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"hotpath_trees: no totals in {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("trees", nargs="*", help="NAME=SRC[:MODULE][:+tracing[=RATIO]]")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--iterations", type=int, default=2000, help="per loop, small bodies (image-3: a tenth)"
    )
    parser.add_argument("--bodies", default="text,image-3")
    parser.add_argument("--calls", action="store_true", help="also count function calls per request")
    parser.add_argument(
        "--instructions", type=int, metavar="N", default=0,
        help="count instructions of N requests per case under valgrind instead of timing (one round)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    trees = [parse_tree(t) for t in args.trees]
    if len(trees) < 2:
        parser.error("give at least two trees")
    args.bodies = [b.strip() for b in args.bodies.split(",")]
    if args.instructions:
        return count_instructions(trees, args)
    rounds: list[dict[str, Any]] = []
    started = time.time()
    for r in range(args.rounds):
        order = trees[r % len(trees) :] + trees[: r % len(trees)]
        entry: dict[str, Any] = {"order": [t["name"] for t in order], "load": os.getloadavg()[0], "trees": {}}
        for tree in order:
            entry["trees"][tree["name"]] = run_tree(tree, args)
            args.calls = args.calls and r == 0  # call counts are the same every round: once is enough
        rounds.append(entry)
        print(f"round {r + 1}/{args.rounds} done (load {entry['load']:.1f})", file=sys.stderr)
    summary: dict[str, dict[str, Any]] = {}
    for tree in trees:
        name = tree["name"]
        for case in rounds[0]["trees"][name]:
            medians = [statistics.median(rd["trees"][name][case]["samples_us"]) for rd in rounds]
            row = summary.setdefault(case, {})
            row[name] = {
                "median_us": round(statistics.median(medians), 1),
                "round_medians_us": [round(m, 1) for m in medians],
                "min_us": round(min(min(rd["trees"][name][case]["samples_us"]) for rd in rounds), 1),
            }
            calls = rounds[0]["trees"][name][case].get("calls_per_request")
            if calls is not None:
                row[name]["calls_per_request"] = calls
    names = [t["name"] for t in trees]
    print("whole per-request bill, µs of CPU (median over rounds of each round's median; min)")
    print("case".ljust(24) + "".join(n.rjust(22) for n in names))
    for case, row in summary.items():
        cells = [f"{row[n]['median_us']:.1f} ({row[n]['min_us']:.1f})" for n in names if n in row]
        print(case.ljust(24) + "".join(c.rjust(22) for c in cells))
    if args.json is not None:
        write_json(
            args.json,
            {
                "clock": "process CPU time around the loop (time.process_time)",
                "unit": "microseconds per request, whole bill (all stages)",
                "trees": trees,
                "wall_s": round(time.time() - started, 1),
                "summary": summary,
                "rounds": rounds,
            },
        )
    return 0


def write_json(path: Path, fields: dict[str, Any]) -> None:
    """The raw record of a run: the command that made it, the interpreter and machine, then
    ``fields``."""
    doc = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        "machine": platform.machine(),
        **fields,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")


def count_instructions(trees: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """One valgrind run per tree; the table is instructions per request, and each tree's ratio
    to the first one."""
    started = time.time()
    counts = {tree["name"]: run_tree(tree, args) for tree in trees}
    names = [t["name"] for t in trees]
    first = names[0]
    print(f"instructions per request (callgrind, {args.instructions} requests per case); ratio to {first}")
    print("case".ljust(24) + "".join(n.rjust(22) for n in names))
    summary: dict[str, dict[str, int]] = {}
    for case in counts[first]:
        row = summary[case] = {n: counts[n][case]["instructions_per_request"] for n in names}
        cells = [f"{row[n]:,} ({row[n] / row[first]:.3f})" for n in names]
        print(case.ljust(24) + "".join(c.rjust(22) for c in cells))
    if args.json is not None:
        write_json(
            args.json,
            {
                "unit": "instructions per request, whole bill (valgrind callgrind, user space only)",
                "requests_per_case": args.instructions,
                "trees": trees,
                "wall_s": round(time.time() - started, 1),
                "summary": summary,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
