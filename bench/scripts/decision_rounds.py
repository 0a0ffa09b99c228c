"""Time several checkouts' scheduling decisions in rotating rounds and keep every run (CPU time).

On a shared VM one tree's decision median moves by ±20-30 % from one run to the next, so a
before/after is only worth quoting from runs of both trees interleaved in one sitting. This driver
runs ``mmgate bench decision --cpu-time`` once per tree per round, the order rotated each round
(round 1: A B C, round 2: B C A, ...), so no tree always runs first or last, records the load
average before each run, and writes one JSON with every run's full output and, per config and
tree, the median of the runs' medians with their range::

    python bench/scripts/decision_rounds.py --rounds 5 --out docs/benchmarks/decision.json \\
        start=/tmp/start/src main=/tmp/main/src

A tree is ``NAME=SRC`` (its ``src`` folder; the bench reads the examples beside it, so each tree
decides under its own configs). Arguments after ``--`` go to ``mmgate bench decision`` (a smoke
test: ``-- --rounds 50``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run_once(src: str, extra: list[str]) -> dict[str, Any]:
    """One ``mmgate bench decision --cpu-time`` of the tree at ``src``: its raw JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        subprocess.run(
            [sys.executable, "-m", "mmgate", "bench", "decision", "--cpu-time", "--out", str(out), *extra],
            env={**os.environ, "PYTHONPATH": src},
            check=True,
            stdout=subprocess.DEVNULL,
        )
        data: dict[str, Any] = json.loads(out.read_text())
        return data


def medians(run: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each config's (decision median, bookkeeping median) in µs, E/P/D as ``e-p-d``."""
    rows = [*run["results"], *([run["epd"]] if run.get("epd") else [])]
    return {r["config"]: (r["median_us"], r["bookkeeping_median_us"]) for r in rows}


def summarise(runs: list[dict[str, Any]], trees: list[str]) -> dict[str, dict[str, Any]]:
    """Per config and tree: the median of the runs' medians, its range and every run's median."""
    out: dict[str, dict[str, Any]] = {}
    for tree in trees:
        mine = [medians(r["output"]) for r in runs if r["tree"] == tree]
        for config in mine[0]:
            values = [m[config][0] for m in mine if config in m]
            out.setdefault(config, {})[tree] = {
                "median_of_medians_us": round(statistics.median(values), 1),
                "min": round(min(values), 1),
                "max": round(max(values), 1),
                "runs": [round(v, 1) for v in values],
                "bookkeeping_median_us": round(statistics.median(m[config][1] for m in mine), 1),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True, help="the combined JSON")
    parser.add_argument("trees", nargs="+", metavar="NAME=SRC")
    args = parser.parse_args(argv)
    trees: list[tuple[str, str]] = []
    for tree in args.trees:
        name, sep, src = tree.partition("=")
        if not sep or not name or not Path(src).is_dir():
            parser.error(f"a tree is NAME=SRC with SRC a folder, not {tree!r}")
        trees.append((name, str(Path(src).resolve())))
    if args.rounds <= 0:
        parser.error("--rounds must be > 0")
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for k in range(len(trees)):
            name, src = trees[(r + k) % len(trees)]
            load = os.getloadavg()[0]
            started = time.strftime("%H:%M:%S", time.gmtime())
            output = run_once(src, extra)
            runs.append(
                {"round": r + 1, "tree": name, "started_utc": started, "loadavg_1m": load, "output": output}
            )
            line = ", ".join(f"{c} {m:.1f}" for c, (m, _) in medians(output).items())
            print(f"{started} round {r + 1} {name} (load {load:.2f}): {line}", flush=True)
    names = [name for name, _ in trees]
    summary = summarise(runs, names)
    record = {
        "command": f"bench/scripts/decision_rounds.py --rounds {args.rounds} {' '.join(args.trees)}"
        + (f" -- {' '.join(extra)}" if extra else ""),
        "clock": "thread CPU time",
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for config, per_tree in summary.items():
        cells = "  ".join(
            f"{t} {v['median_of_medians_us']:.1f} ({v['min']:.0f}-{v['max']:.0f})"
            for t, v in per_tree.items()
        )
        print(f"{config:28s} {cells}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
