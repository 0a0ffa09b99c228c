"""docs/benchmarks/img/extproc.png: each system's requests/s against `mmgate serve`'s, per body,
from one or more `mmgate bench overhead` runs (their JSON), with the 0.5x target drawn.

The ratio is the median requests/s over a run's rounds divided by `mmgate serve`'s median in the
same run (docs/benchmarks/extproc.md reads it so)::

    python bench/scripts/extproc_plot.py docs/benchmarks/extproc-configs.json \
        docs/benchmarks/extproc-configs-2.json --out docs/benchmarks/img/extproc.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

SERVE = "mmgate (round-robin)"
SHORT = {
    "envoy (direct)": "Envoy alone",
    "envoy + mmgate extproc (round-robin, original-dst/streamed/lean)": "llm-d config",
    "envoy + mmgate extproc (round-robin, original-dst/buffered/lean)": "buffered",
    "envoy + mmgate extproc (round-robin, override-host/streamed/lean)": "override_host",
    "envoy + mmgate extproc (round-robin, original-dst/streamed/lean/2)": "llm-d config,\n2 processes",
    "envoy + null picker (original-dst/streamed)": "null picker\n(the bound)",
}


def ratios(raw: dict[str, Any], body: str) -> dict[str, float]:
    """Each system's median requests/s over ``raw``'s rounds, over `mmgate serve`'s."""
    per: dict[str, list[float]] = {}
    for cell in raw["cells"]:
        if cell["body"] == body:
            done = cell["throughput"]
            per.setdefault(cell["system"], []).append(done["ok"] / done["elapsed_s"])
    serve = statistics.median(per[SERVE])
    return {name: statistics.median(values) / serve for name, values in per.items() if name in SHORT}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="`mmgate bench overhead` JSON files")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    raws = [json.loads(path.read_text()) for path in args.runs]
    bodies = list(raws[0]["bodies"])
    fig, axes = plt.subplots(1, len(bodies), figsize=(6 * len(bodies), 4.2), sharey=True)
    axes = axes if len(bodies) > 1 else [axes]
    width = 0.8 / len(raws)
    for ax, body in zip(axes, bodies, strict=True):
        names = [name for name in SHORT if name in ratios(raws[0], body)]
        for n, raw in enumerate(raws):
            got = ratios(raw, body)
            xs = [i + (n - (len(raws) - 1) / 2) * width for i in range(len(names))]
            ax.bar(xs, [got.get(name, 0.0) for name in names], width, label=f"run {n + 1}")
        ax.axhline(0.5, color="black", linestyle="--", linewidth=1)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(names)), [SHORT[name] for name in names], fontsize=8)
        ax.set_title(f"{body}: requests/s against mmgate serve (dashed: 0.5x)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("median req/s / mmgate serve's")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
