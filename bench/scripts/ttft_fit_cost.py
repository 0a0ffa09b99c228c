"""CPU time per observed TTFT of the predicted-TTFT rate learner: this tree's against another's.

    python bench/scripts/ttft_fit_cost.py --other /path/to/other/src/mmgate/scheduling/ttft/fit.py \\
        --out results/predicted-ttft-fit-cost.json

One seeded stream of 4,000 observations over 8 endpoints (after 800 to warm the fits); after every
``k``-th observation a decision reads all 8 endpoints' rates (k = 1: a first token between every
two decisions; k = 4: bursts). The two learners alternate, 7 rounds each, on the thread's CPU
clock; the medians are printed and the raw times written.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from mmgate.scheduling.ttft import RateLearner, Rates, RateTable
from mmgate.scheduling.types import EndpointState

BASE = Rates(0.015, 1 / 15751, 2.8e-5)
ENDPOINTS = [EndpointState(f"10.0.0.{i}:8000") for i in range(8)]


def _observations() -> list[tuple[EndpointState, tuple[float, ...], float]]:
    rng = random.Random(1)
    out: list[tuple[EndpointState, tuple[float, ...], float]] = []
    for _ in range(4000):
        x = (
            1.0,
            float(rng.randint(0, 4000)),
            float(rng.randint(0, 3000)),
            float(rng.choice([0, 0, 880])),
            float(rng.randint(0, 3000)),
            float(rng.randint(0, 20000)),
        )
        out.append((ENDPOINTS[rng.randrange(8)], x, BASE.seconds(x) * rng.uniform(0.8, 1.2)))
    return out


def _per_observation_us(cls: Any, obs: list[Any], every: int) -> float:
    learner = cls(BASE, RateTable(BASE).configured)
    for ep, x, y in obs[:800]:
        learner.observe(ep, x, y)
    t = time.thread_time()
    for i, (ep, x, y) in enumerate(obs[800:]):
        learner.observe(ep, x, y)
        if i % every == 0:
            for e in ENDPOINTS:
                learner.rates(e)
    return (time.thread_time() - t) / (len(obs) - 800) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, type=Path, help="the other tree's ttft/fit.py")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if not args.other.is_file():
        print(f"error: {args.other} is not a file", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("other_fit", args.other)
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    obs = _observations()
    out: dict[str, Any] = {"other": str(args.other), "rounds": 7}
    for every in (1, 4):
        theirs, ours = [], []
        for _ in range(7):
            theirs.append(_per_observation_us(other.RateLearner, obs, every))
            ours.append(_per_observation_us(RateLearner, obs, every))
        a, b = statistics.median(theirs), statistics.median(ours)
        out[f"decision_every_{every}_observations"] = {
            "other_us": theirs,
            "this_us": ours,
            "other_median_us": a,
            "this_median_us": b,
        }
        print(f"a decision every {every} observations: other {a:.1f} µs, this {b:.1f} µs")
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
