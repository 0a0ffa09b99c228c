"""Turning the overhead benchmark's raw numbers into tables, ratios, goals and a plot.

Pure functions over the JSON that :mod:`mmgate_bench.overhead.harness` writes, so a report can be
re-rendered from a saved run (``summarize(json.load(...))``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmgate.tables import Table, columns, emit
from mmgate_bench.results import markdown_table
from mmgate_bench.stats import median, percentile

# The goals: body -> (min req/s ratio over the best peer, max added p50 in ms).
GOALS: dict[str, tuple[float, float]] = {"image-3": (1.2, 3.0), "text": (0.6, 1.0)}


def _rate(result: dict[str, Any]) -> float:
    return float(result["ok"]) / max(float(result["elapsed_s"]), 1e-9)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per system and body: latency, added latency over direct, throughput, CPU, memory; ratios."""
    systems = {s["name"]: s for s in raw["systems"]}
    rows: list[dict[str, Any]] = []
    for body in raw["bodies"]:
        for name, system in systems.items():
            cells = [c for c in raw["cells"] if c["system"] == name and c["body"] == body]
            if not cells:
                continue
            latencies = [v for c in cells for v in c["latency"]["latencies_ms"]]
            ttfb = [v for c in cells for v in c["latency"]["ttfb_ms"]]
            jobs = [job for c in cells for job in (c["latency"], c["throughput"])]
            requests = sum(job["ok"] + job["errors"] for job in jobs)
            router_cpu = [job["router_cpu_s"] for job in jobs if job.get("router_cpu_s") is not None]
            picker_cpu = [job["picker_cpu_s"] for job in jobs if job.get("picker_cpu_s") is not None]
            rounds = [_rate(c["throughput"]) for c in cells]
            rows.append(
                {
                    "system": name,
                    "kind": system["kind"],
                    "body": body,
                    "requests": requests,
                    "errors": sum(job["errors"] for job in jobs),
                    "p50_ms": percentile(latencies, 50),
                    "p99_ms": percentile(latencies, 99),
                    "ttfb_p50_ms": percentile(ttfb, 50),
                    "rps": median(rounds),
                    "rps_rounds": rounds,
                    "cpu_s_per_1k": 1000 * sum(router_cpu) / requests if router_cpu and requests else None,
                    "upstream_cpu_s_per_1k": 1000 * sum(j["upstream_cpu_s"] for j in jobs) / max(requests, 1),
                    # ext_proc systems: the picker's part of cpu_s_per_1k (Envoy is the rest)
                    "picker_cpu_s_per_1k": 1000 * sum(picker_cpu) / requests
                    if picker_cpu and requests
                    else None,
                    "peak_rss_mb": system.get("peak_rss_mb"),
                }
            )
    direct = {r["body"]: r for r in rows if r["kind"] == "direct"}
    for row in rows:
        base = direct.get(row["body"])
        for key in ("p50", "p99"):
            mine, theirs = row[f"{key}_ms"], base[f"{key}_ms"] if base else None
            row[f"added_{key}_ms"] = (
                None if mine is None or theirs is None or row["kind"] == "direct" else mine - theirs
            )
    ratios, goals = _ratios(rows)
    sustained = _sustained(raw.get("sweep", []))
    kinds = {s["name"]: s["kind"] for s in raw["systems"]}
    for goal in goals:
        rates = sustained.get(goal["body"], {})
        peer_rates = [v for name, v in rates.items() if kinds.get(name) == "peer"]
        mine = rates.get(goal["system"])
        best_peer = max(peer_rates, default=0.0)
        goal["sustained_ratio"] = mine / best_peer if mine is not None and best_peer > 0 else None
    return {
        "meta": raw["meta"],
        "settings": raw.get("settings", {}),
        "bodies": raw["bodies"],
        "systems": raw["systems"],
        "rows": rows,
        "ratios": ratios,
        "goals": goals,
        "sweep": raw.get("sweep", []),
        "sustained": sustained,
    }


def _ratios(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ratios: list[dict[str, Any]] = []
    goals: list[dict[str, Any]] = []
    for body in dict.fromkeys(r["body"] for r in rows):
        peers = [r for r in rows if r["body"] == body and r["kind"] == "peer"]
        best = max(peers, key=lambda r: r["rps"], default=None)
        for mine in (r for r in rows if r["body"] == body and r["kind"] == "mmgate"):
            entry: dict[str, Any] = {
                "body": body,
                "system": mine["system"],
                "best_peer": best and best["system"],
            }
            entry["rps_ratio"] = mine["rps"] / best["rps"] if best and best["rps"] else None
            entry["cpu_ratio"] = (
                mine["cpu_s_per_1k"] / best["cpu_s_per_1k"]
                if best and mine["cpu_s_per_1k"] and best["cpu_s_per_1k"]
                else None
            )
            entry["added_p50_ms"] = mine["added_p50_ms"]
            entry["best_peer_added_p50_ms"] = best and best["added_p50_ms"]
            ratios.append(entry)
            if body in GOALS:
                want_ratio, want_added = GOALS[body]
                ratio, added = entry["rps_ratio"], mine["added_p50_ms"]
                goals.append(
                    {
                        "body": body,
                        "system": mine["system"],
                        "rps_ratio": ratio,
                        "rps_goal": want_ratio,
                        "rps_met": ratio is not None and ratio >= want_ratio,
                        "added_p50_ms": added,
                        "added_goal_ms": want_added,
                        "added_met": added is not None and added <= want_added,
                    }
                )
    return ratios, goals


SUSTAINED_SERVED = 0.95
SUSTAINED_SLOWDOWN = 10.0
SUSTAINED_FLOOR_MS = 50.0


def _sustained(sweep: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per body and system: the highest offered rate of the unbroken run of rates, from the
    lowest up, that were all sustained: >= 95% served, no errors, and p50 no worse than 10x the
    p50 at the lowest rate (or 50 ms, whichever is larger). 0 when the lowest rate already fails.

    Stopping at the first failure keeps one lucky step above a failing one from counting.
    """
    out: dict[str, dict[str, float]] = {}
    for body in dict.fromkeys(p["body"] for p in sweep):
        for system in dict.fromkeys(p["system"] for p in sweep if p["body"] == body):
            points = sorted(
                (p for p in sweep if p["body"] == body and p["system"] == system),
                key=lambda p: p["offered_rps"],
            )
            base = points[0]["p50_ms"] or 0.0
            limit = max(SUSTAINED_SLOWDOWN * base, SUSTAINED_FLOOR_MS)
            best = 0.0
            for point in points:
                served = point["achieved_rps"] >= SUSTAINED_SERVED * point["offered_rps"]
                fast = point["p50_ms"] is not None and point["p50_ms"] <= limit
                if point["errors"] or not served or not fast:
                    break
                best = point["offered_rps"]
            out.setdefault(body, {})[system] = best
    return out


def _fmt(value: float | None, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


TABLE_HEADER = (
    "system",
    "p50 ms",
    "p99 ms",
    "added p50",
    "added p99",
    "max req/s",
    "CPU s/1k req",
    "peak RSS MiB",
    "errors",
)


def table_rows(summary: dict[str, Any], body: str) -> list[list[str]]:
    return [
        [
            r["system"],
            _fmt(r["p50_ms"]),
            _fmt(r["p99_ms"]),
            _fmt(r["added_p50_ms"], signed=True),
            _fmt(r["added_p99_ms"], signed=True),
            _fmt(r["rps"], 0),
            _fmt(r["cpu_s_per_1k"], 3),
            _fmt(r["peak_rss_mb"], 0),
            str(r["errors"]),
        ]
        for r in summary["rows"]
        if r["body"] == body
    ]


def markdown(summary: dict[str, Any]) -> str:
    """The report's tables as markdown (docs/benchmarks/overhead.md quotes them)."""
    meta, settings = summary["meta"], summary["settings"]
    lines = [
        f"Run {meta['started']} → {meta['finished']}, `{meta['command'].strip()}`; "
        f"{settings.get('rounds')} interleaved rounds; latency = {settings.get('latency_requests')} "
        f"sequential requests per round; max req/s = median over rounds of {settings.get('concurrency')} "
        f"connections for {settings.get('throughput_seconds')} s; null upstream delay "
        f"{settings.get('upstream_latency_ms')} ms.",
        "",
        "Versions: "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
        + f"; Python {meta['python']}.",
        "",
        _machine_line(meta),
        "",
    ]
    skipped = [s for s in summary["systems"] if s["status"] != "ok"]
    for system in skipped:
        lines.append(f"- **{system['name']} skipped**: {system['reason']}")
    if skipped:
        lines.append("")
    for body, info in summary["bodies"].items():
        lines += [f"### {body}: {info['description']} ({info['bytes'] / 1e6:.3f} MB)", ""]
        lines += markdown_table(TABLE_HEADER, table_rows(summary, body))
        lines.append("")
    if summary["ratios"]:
        lines += ["### mmgate / best peer", ""]
        rows = [
            [
                r["body"],
                r["system"],
                r["best_peer"] or "—",
                _fmt(r["rps_ratio"]) + "x" if r["rps_ratio"] else "—",
                _fmt(r["cpu_ratio"]) + "x" if r["cpu_ratio"] else "—",
                _fmt(r["added_p50_ms"], signed=True),
                _fmt(r["best_peer_added_p50_ms"], signed=True),
            ]
            for r in summary["ratios"]
        ]
        header = (
            "body",
            "mmgate",
            "best peer (req/s)",
            "req/s ratio",
            "CPU ratio",
            "added p50",
            "peer added p50",
        )
        lines += markdown_table(header, rows)
        lines.append("")
    if summary["goals"]:
        lines += ["### Goals", ""]
        rows = [
            [
                g["body"],
                g["system"],
                f"{_fmt(g['rps_ratio'])}x (goal ≥ {g['rps_goal']}x) {'met' if g['rps_met'] else 'MISSED'}"
                if g["rps_ratio"] is not None
                else "— (no peer measured)",
                f"{_fmt(g['added_p50_ms'], signed=True)} ms (goal ≤ {g['added_goal_ms']}) "
                + ("met" if g["added_met"] else "MISSED"),
                "—"
                if g.get("sustained_ratio") is None
                else f"{_fmt(g['sustained_ratio'])}x "
                + ("met" if g["sustained_ratio"] >= g["rps_goal"] else "MISSED"),
            ]
            for g in summary["goals"]
        ]
        lines += markdown_table(
            (
                "body",
                "mmgate",
                "max req/s vs best peer (closed loop)",
                "added p50",
                "sustained rate vs best peer (sweep)",
            ),
            rows,
        )
        lines.append("")
    if summary["sustained"]:
        lines += [
            "### Highest offered rate sustained in the open-loop sweep",
            "",
            "(every rate up to it: ≥ 95% served, no errors, p50 ≤ max(10x the lowest rate's p50, 50 ms))",
            "",
        ]
        bodies = list(summary["sustained"])
        names = list(dict.fromkeys(n for per in summary["sustained"].values() for n in per))
        rows = [[n, *(_fmt(summary["sustained"][b].get(n), 0) for b in bodies)] for n in names]
        lines += markdown_table(("system", *(f"{b} req/s" for b in bodies)), rows)
        lines.append("")
    return "\n".join(lines)


def _machine_line(meta: dict[str, Any]) -> str:
    machine = meta.get("machine", {})
    cpus, model, kernel = (machine.get(k, "?") for k in ("cpus", "cpu_model", "kernel"))
    text = f"Machine: {cpus} CPUs ({model}), Linux {kernel}"
    load = meta.get("load_average")
    if load:
        text += (
            f"; 1-minute load average {load['start'][0]:.1f} at the start, {load['end'][0]:.1f} at the end"
            " (other engineers' jobs share the machine)"
        )
    return text + "."


def print_tables(summary: dict[str, Any]) -> None:
    """The per-body tables (drawn in full when piped) and whether each goal was met."""
    tables = []
    for body, info in summary["bodies"].items():
        table = Table(
            columns(*TABLE_HEADER, numeric=TABLE_HEADER[1:]),
            title=f"{body}: {info['description']} ({info['bytes'] / 1e6:.2f} MB)",
        )
        for row in table_rows(summary, body):
            table.add(*row)
        tables.append(table)
    emit(tables, "table")
    for goal in summary["goals"]:
        verdict = "met" if goal["rps_met"] and goal["added_met"] else "MISSED"
        print(
            f"goal {goal['body']} {goal['system']}: req/s {_fmt(goal['rps_ratio'])} x best peer "
            f"(≥ {goal['rps_goal']}x), added p50 {_fmt(goal['added_p50_ms'], signed=True)} ms "
            f"(≤ {goal['added_goal_ms']}): {verdict}"
        )


def plot(summary: dict[str, Any], path: Path) -> None:
    """Latency (p50 solid, p99 dotted) against offered rate, one panel per swept body."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bodies = list(dict.fromkeys(p["body"] for p in summary["sweep"])) or ["(no sweep)"]
    fig, axes = plt.subplots(1, len(bodies), figsize=(6.5 * len(bodies), 4.8), squeeze=False)
    colours = plt.get_cmap("tab10")
    names = list(dict.fromkeys(p["system"] for p in summary["sweep"]))
    for ax, body in zip(axes[0], bodies, strict=True):
        for index, name in enumerate(names):
            points = sorted(
                (p for p in summary["sweep"] if p["body"] == body and p["system"] == name and p["p50_ms"]),
                key=lambda p: p["offered_rps"],
            )
            if not points:
                continue
            xs = [p["offered_rps"] for p in points]
            colour = colours(index % 10)
            ax.plot(xs, [p["p50_ms"] for p in points], "-o", color=colour, label=name, markersize=3)
            ax.plot(xs, [p["p99_ms"] for p in points], ":", color=colour, linewidth=1)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel("latency (ms): p50 solid, p99 dotted")
        size = summary["bodies"].get(body, {}).get("bytes")
        ax.set_title(f"{body}" + (f" ({size / 1e6:.2f} MB body)" if size else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Router overhead over a null upstream (one interleaved run; shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
