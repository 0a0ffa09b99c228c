"""Instructions per scheduling decision, per component, for one or more checkouts (valgrind).

On a shared, loaded machine the decision benchmark's microseconds move by tens of percent between
runs. Instruction counts do not: this driver runs the decision benchmark's E/P/D or predicted-TTFT
case under ``valgrind --tool=callgrind`` and counts the instructions of each producer, profile,
profile-handler call and routing-header hook, so two trees can be compared whatever the load.
Each component is bracketed by calls to ``time.thread_time_ns`` and callgrind dumps its counters
before every such call (``--dump-before=time_thread_time_ns``); a dump is then the cost of one
segment. The marker calls and the wrappers add a little to every component alike::

    python bench/scripts/decision_instructions.py --case e-p-d before=/tmp/before/src after=src

A tree is ``NAME=SRC`` (its ``src`` folder, run with the checkout's ``bench/src`` beside it; the
cases and configs are that tree's own). The decisions timed are those of ``mmgate bench decision``
(``schedule`` plus the routing-header hooks), after the same warm-up of 150 decisions with their
lifecycle. Needs valgrind (Debian ``valgrind``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hotpath_trees import tree_path  # bench/scripts/ is on sys.path: run as a script

WARM = 150
MARK = "time_thread_time_ns"


def worker(case: str, decisions: int, labels_path: str) -> None:
    """Run ``decisions`` decisions of ``case`` with every component bracketed by markers."""
    import gc
    from dataclasses import replace

    from msgspec.structs import replace as replace_struct

    from mmgate.config import load_config
    from mmgate.request.view import MediaAsset
    from mmgate.scheduling import SchedulingRequest, build_scheduler
    from mmgate_bench.micro import decision as bench

    shapes: dict[str, tuple[str, int, list[str], int]] = {
        "e-p-d": ("e-p-d.yaml", 4, bench.epd_roles((4, 4, 8)), 16),
        "predicted-ttft@8": ("predicted-ttft.yaml", 3, [], 8),
        "predicted-ttft@64": ("predicted-ttft.yaml", 3, [], 64),
        "aggregated": ("aggregated.yaml", 3, [], 8),
        # E/PD, 4 encode + 12 PD pods: the static offload and the per-request encode placement
        "e-pd": ("e-pd.yaml", 4, ["encode"] * 4 + ["prefill-decode"] * 12, 16),
        "e-pd-adaptive": ("e-pd-adaptive.yaml", 4, ["encode"] * 4 + ["prefill-decode"] * 12, 16),
        # cold photos, requests decoding between first token and end: the decider without and
        # with its view of TPOT (what a local encode does to the decodes on the PD pod)
        "e-pd-adaptive-cold": ("e-pd-adaptive.yaml", 4, ["encode"] * 4 + ["prefill-decode"] * 12, 16),
        "e-pd-adaptive-tpot": (
            "../docs/benchmarks/disaggregation/e-pd-adaptive-tpot.yaml", 4,
            ["encode"] * 4 + ["prefill-decode"] * 12, 16,
        ),
    }  # fmt: skip
    config, images, roles, n = shapes[case]
    views = bench.three_image_views(10, 5, images=images)
    cfg = load_config(bench.EXAMPLES / config)
    scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=1)
    endpoints = bench.fleet(n, roles)
    labels: list[str] = []
    on = [False]
    mark = time.thread_time_ns

    def bracket(obj: Any, method: str, label: str) -> None:
        inner = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not on[0]:
                return inner(*args, **kwargs)
            mark()
            labels.append(label)
            out = inner(*args, **kwargs)
            mark()
            labels.append("")
            return out

        setattr(obj, method, timed)

    for producer in scheduler.producers:
        bracket(producer, "produce", producer.name)
    for name, profile in scheduler.profiles.items():
        bracket(profile, "run", f"profile {name}")
    bracket(scheduler.handler, "pick_profiles", "profile handler")
    bracket(scheduler.handler, "process_results", "profile handler")
    for plugin in scheduler.plugins.values():
        if getattr(plugin, "before_send", False):
            bracket(plugin, "pre_request", f"header {plugin.name}")
    pending: list[str] = []
    decoding: list[str] = []  # e-pd-adaptive-tpot: 64 more decode after their first token
    cold = case.startswith("e-pd-adaptive-")
    decodes = 64 if cold else 0
    gc.disable()
    for r in range(WARM + decisions):
        view = bench.unique(views[r % len(views)], r)
        if cold:  # photos no pod has seen
            parts = [
                replace(p, identity=f"{p.identity}-{r}") if isinstance(p, MediaAsset) else p
                for p in view.parts
            ]
            view = replace_struct(view, parts=parts)
        req = SchedulingRequest(view, f"r{r}")
        now = r * 0.001
        timed_now = r >= WARM
        if timed_now:
            on[0] = True
            mark()
            labels.append("scheduler")
        result = scheduler.schedule(req, endpoints, now)
        scheduler.pre_request_before_send(req, result, now)
        if timed_now:
            mark()
            labels.append("")
            on[0] = False
        scheduler.start(req, result, now)
        scheduler.pre_request_deferred(req, result, now)
        pending.append(req.request_id)
        if len(pending) > 64:
            done = pending.pop(0)
            scheduler.on_first_token(done, now)
            decoding.append(done)
        if len(decoding) > decodes:
            scheduler.on_finished(decoding.pop(0), now)
    Path(labels_path).write_text(json.dumps(labels))


def count(src: str, case: str, decisions: int) -> dict[str, float]:
    """Instructions per decision of each component of ``case`` in the tree at ``src``."""
    with tempfile.TemporaryDirectory() as tmp:
        labels_path = os.path.join(tmp, "labels.json")
        out = os.path.join(tmp, "cg")
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--dump-before={MARK}", "--dump-instr=no",
                f"--callgrind-out-file={out}", sys.executable, __file__, "--worker", case,
                str(decisions), labels_path,
            ],
            env={**os.environ, "PYTHONPATH": tree_path(src)},
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        labels = json.loads(Path(labels_path).read_text())
        totals: dict[int, int] = {}
        for path in Path(tmp).glob("cg.*"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("summary:"):
                    totals[int(path.suffix[1:])] = int(line.split()[1])
                    break
    # Dump k is written before marker call k (numbered from 1), so the segment that starts at
    # marker i (0-based) is dump i + 2; it belongs to the innermost component open there.
    per: collections.Counter[str] = collections.Counter()
    stack: list[str] = []
    for i, label in enumerate(labels):
        if label:
            stack.append(label)
        else:
            stack.pop()
        if stack:
            per[stack[-1]] += totals.get(i + 2, 0)
    return {name: value / decisions for name, value in per.items()}


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--case",
        default="e-p-d",
        choices=(
            "e-p-d",
            "predicted-ttft@8",
            "predicted-ttft@64",
            "aggregated",
            "e-pd",
            "e-pd-adaptive",
            "e-pd-adaptive-cold",
            "e-pd-adaptive-tpot",
        ),
    )
    parser.add_argument("--decisions", type=int, default=20)
    parser.add_argument("trees", nargs="+", metavar="NAME=SRC")
    args = parser.parse_args(argv)
    trees = []
    for tree in args.trees:
        name, sep, src = tree.partition("=")
        if not sep or not name or not src:
            parser.error(f"a tree is NAME=SRC, not {tree!r}")
        trees.append((name, str(Path(src).resolve())))
    results = {name: count(src, args.case, args.decisions) for name, src in trees}
    first = results[trees[0][0]]
    components = sorted({c for r in results.values() for c in r}, key=lambda c: -first.get(c, 0.0))
    print(f"instructions per decision, {args.case}, {args.decisions} decisions")
    print(f"{'':32s}" + "".join(f"{name:>14s}" for name, _ in trees))
    for component in [*components, "total"]:
        row = [sum(r.values()) if component == "total" else r.get(component, 0.0) for r in results.values()]
        print(f"{component:32s}" + "".join(f"{v:14,.0f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
