"""Load-independent figures of the gateway's per-request hot path, for several checkouts.

On the shared machine CPU time per request moves by tens of percent between runs; these do not:
function calls per request (``sys.setprofile``), the peak of Python allocations during a request
above what the loop started with (``tracemalloc``: a copy of a 2.36 MB body shows as megabytes),
and with ``--valgrind`` the instructions and first-level data-cache misses per request (callgrind,
between two marker calls around the loop, as ``bench/scripts/decision_instructions.py`` does). Each tree
runs in its own process with its own copy of the hot-path benchmark (``build``, ``request_loop``,
``body``, ``BODIES``, ``STAGES``), the whole bill (every stage)::

    python bench/scripts/hotpath_memory.py --valgrind base=/tmp/base/src after=src

A tree is ``NAME=SRC[:MODULE]``, run with the checkout's ``bench/src`` beside ``SRC`` (module default
as in ``hotpath_trees.py``: the tree's own copy of ``micro/hotpath``). Needs valgrind
(Debian ``valgrind``) for ``--valgrind``; each valgrind run takes minutes (the imports dominate).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hotpath_trees import calls_per_request, default_module, tree_path  # bench/scripts/ is on sys.path

MARK = "time_thread_time_ns"
EVENTS = ("Ir", "D1mr", "D1mw")


def worker(module: str, config: str, body_name: str, requests: int, valgrind: bool) -> dict[str, Any]:
    """Inside the tree's process: one case, ``requests`` requests after a warm-up of 20."""
    import gc
    import importlib
    import tracemalloc

    hotpath = importlib.import_module(module)
    gateway = hotpath.build(config)
    run = hotpath.request_loop(gateway, hotpath.body(hotpath.BODIES[body_name]), len(hotpath.STAGES) - 1)
    run(20)
    gc.collect()
    if valgrind:  # callgrind dumps before each marker: the second dump is the loop alone
        time.thread_time_ns()
        run(requests)
        time.thread_time_ns()
        return {}
    calls = calls_per_request(run, requests)
    tracemalloc.start()
    run(3)
    start, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    run(requests)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_kib = round((peak - start) / 1024, 1)
    return {"calls_per_request": calls, "peak_kib_per_request": peak_kib}


def _costs(dump: Path, requests: int) -> dict[str, int]:
    events: list[str] = []
    for line in dump.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            totals = dict(zip(events, (int(v) for v in line.split()[1:]), strict=False))
            return {e: round(totals.get(e, 0) / requests) for e in EVENTS}
    raise SystemExit(f"hotpath_memory: no totals in {dump}")


def measure(tree: dict[str, str], config: str, body_name: str, args: argparse.Namespace) -> dict[str, Any]:
    spec = json.dumps([tree["module"], config, body_name, args.requests, False])
    env = dict(os.environ, PYTHONPATH=tree_path(tree["src"]))
    cmd = [sys.executable, __file__, "--worker", spec]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"hotpath_memory: {tree['name']} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if args.valgrind:
        spec = json.dumps([tree["module"], config, body_name, args.valgrind_requests, True])
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cg.out"
            grind = [
                "valgrind", "--tool=callgrind", f"--dump-before={MARK}", "--dump-instr=no",
                "--cache-sim=yes", f"--callgrind-out-file={out}", sys.executable, __file__, "--worker", spec,
            ]  # fmt: skip
            subprocess.run(grind, env=env, capture_output=True, check=False)
            loop = Path(f"{out}.2")
            if not loop.exists():
                raise SystemExit(f"hotpath_memory: valgrind gave no loop dump for {tree['name']}")
            result.update(_costs(loop, args.valgrind_requests))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("trees", nargs="*", help="NAME=SRC[:MODULE]")
    parser.add_argument("--configs", default="round-robin,aggregated")
    parser.add_argument("--bodies", default="image-3")
    parser.add_argument("--requests", type=int, default=50, help="requests per count (default 50)")
    parser.add_argument("--valgrind", action="store_true", help="also instructions and D1 misses")
    parser.add_argument("--valgrind-requests", type=int, default=10)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        module, config, body_name, requests, valgrind = json.loads(args.worker)
        print(json.dumps(worker(module, config, body_name, requests, valgrind)))
        return 0
    trees = []
    for text in args.trees:
        name, _, rest = text.partition("=")
        src, _, module = rest.partition(":")
        if not name or not src:
            parser.error(f"a tree is NAME=SRC[:MODULE], not {text!r}")
        src = str(Path(src).resolve())
        trees.append({"name": name, "src": src, "module": module or default_module(src)})
    if not trees:
        parser.error("give at least one tree")
    results: dict[str, dict[str, Any]] = {}
    for config in args.configs.split(","):
        for body_name in args.bodies.split(","):
            case = f"{config} × {body_name}"
            for tree in trees:
                row = results.setdefault(case, {})[tree["name"]] = measure(tree, config, body_name, args)
                cells = "  ".join(f"{k} {v}" for k, v in row.items())
                print(f"{case:28} {tree['name']:12} {cells}", flush=True)
    if args.json is not None:
        report = {"trees": trees, "requests": args.requests, "valgrind_requests": args.valgrind_requests}
        args.json.write_text(json.dumps({**report, "results": results}, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
