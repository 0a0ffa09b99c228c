"""``mmgate bench flow-control --plot``: one PNG per report, two panels side by side.

Left, each tenant's TTFT p90 per system on a log scale (the flood moves it by orders of
magnitude), with A alone as a dashed line: how far each system leaves the victim from its own
floor. Right, each tenant's fleet share (its part of the served cost) per system, stacked, counted by
requests completed in the window (plain) and by requests prefilled in it (hatched), with A's
demand marked: who the fleet worked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"A": "C0", "B": "C3"}


def _refused(row: dict[str, Any]) -> int:
    return sum(sum(row.get(t, {}).get("refused", {}).values()) for t in ("A", "B"))


def plot_report(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(report["systems"])
    rows = [report["systems"][s] for s in systems]
    labels = [f"{s}\n({n} refused)" if (n := _refused(r)) else s for s, r in zip(systems, rows, strict=True)]
    x = range(len(systems))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))

    width = 0.38
    for k, tenant in enumerate(("A", "B")):
        values = [r.get(tenant, {}).get("ttft_p90_s") or float("nan") for r in rows]
        xs = [i + (k - 0.5) * width for i in x]
        bars = left.bar(xs, values, width, color=COLOURS[tenant], label=f"tenant {tenant}")
        for bar, value in zip(bars, values, strict=True):
            if value == value:  # not NaN
                left.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, value), ha="center",
                              va="bottom", fontsize=7)  # fmt: skip
    alone = report.get("a_alone", {}).get("ttft_p90_s")
    if alone:
        left.axhline(alone, color=COLOURS["A"], ls="--", lw=1, label=f"A alone ({alone:.3g} s)")
    left.set_yscale("log")
    top = max((v for r in rows for t in ("A", "B") if (v := r.get(t, {}).get("ttft_p90_s"))), default=1.0)
    left.set_ylim(top=top * 12)  # room for the legend above the bars
    left.set_ylabel("TTFT p90 (s, log)")
    left.set_title("time to first token, p90")
    left.set_xticks(list(x), labels, fontsize=8)
    left.legend(fontsize=8, loc="upper left", ncol=3)
    left.grid(True, axis="y", which="both", alpha=0.3)

    top = 1.05
    for offset, key, hatch, what in (
        (-0.2, "fleet_share", "", "completed"),
        (0.2, "prefill_share", "//", "prefilled"),
    ):
        bottom = [0.0] * len(systems)
        xs = [i + offset for i in x]
        for tenant in ("A", "B"):
            shares = [r.get(tenant, {}).get(key) or 0.0 for r in rows]
            right.bar(xs, shares, 0.38, bottom=bottom, color=COLOURS[tenant], hatch=hatch, edgecolor="white",
                      label=f"{tenant}, {what} in the window")  # fmt: skip
            for xi, share, base in zip(xs, shares, bottom, strict=True):
                b = tenant == "B"
                right.annotate(f"{share:.2f}", (xi, base + share), ha="center", va="bottom" if b else "top",
                               fontsize=6, color="black" if b else "white")  # fmt: skip
            bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
        top = max(top, max(bottom) * 1.1)
    demand = report["offered_rps"]["A"] / report["capacity_rps"]["A"]
    right.axhline(demand, color=COLOURS["A"], ls="--", lw=1, label=f"A's demand ({demand:.2f})")
    right.set_ylim(0, top * 1.25)  # room for the legend
    right.set_ylabel("fleet share (in the window, over capacity)")
    right.set_title("served cost per tenant")
    right.set_xticks(list(x), labels, fontsize=8)
    right.legend(fontsize=7, loc="upper left", ncol=2)
    right.grid(True, axis="y", alpha=0.3)

    mode = "over HTTP" if report.get("mode") == "http" else "DES"
    offered, cap = report["offered_rps"], report["capacity_rps"]
    fig.suptitle(
        f"{report['scenario']}, {mode}: {report['pods']} x {report['profile']}, A {offered['A']:g}/s, "
        f"B {offered['B']:g}/s ({offered['B'] / cap['B']:.1f}x its capacity), "
        f"{report['duration_s']:g} s of arrivals",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
