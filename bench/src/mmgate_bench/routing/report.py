"""Reports: one record per system and rate, as JSON, a markdown table and matplotlib PNGs.

The JSON field names are a stable contract (snake_case, seconds suffixed ``_s``); the markdown and
the plots are made from the JSON alone, so ``mmgate bench plot DIR`` can redraw any saved run.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mmgate_bench import results
from mmgate_bench.routing.prediction_metrics import merged
from mmgate_bench.routing.records import RequestRecord, RungResult
from mmgate_bench.stats import histogram_quantile, percentile, percentiles, weighted_percentile

FIELDS = (
    "system",
    "rate",
    "output_tokens_per_s",
    "requests_per_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p90_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "failures",
    "prefix_cache_hit_ratio",
    "encoder_cache_hit_ratio",
)


def _itl_percentiles(rung: RungResult, ok: Sequence[RequestRecord]) -> tuple[float | None, float | None]:
    if rung.itl_weighted is not None:
        return weighted_percentile(rung.itl_weighted, 50), weighted_percentile(rung.itl_weighted, 90)
    low, high = percentiles((gap for r in ok for gap in r.itl_s), (50, 90))
    return low, high


def summarize(rung: RungResult, workload: str = "") -> dict[str, Any]:
    """The report record of one rung (see :data:`FIELDS`, plus context fields)."""
    ok = [r for r in rung.records if r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    tpot = [t for r in ok if (t := r.tpot_s) is not None]
    itl_p50, itl_p90 = _itl_percentiles(rung, ok)
    span = rung.span_s if rung.span_s > 0 else rung.duration_s
    kinds = Counter(r.error for r in rung.records if r.error is not None)
    return {
        "system": rung.system,
        "rate": rung.rate,
        "output_tokens_per_s": sum(r.output_tokens for r in ok) / span,
        "requests_per_s": len(ok) / span,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_s": itl_p50,
        "itl_p90_s": itl_p90,
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p90_s": percentile(e2e, 90),
        "failures": sum(kinds.values()),
        "prefix_cache_hit_ratio": rung.cache.prefix_hit_ratio,
        "encoder_cache_hit_ratio": rung.cache.encoder_hit_ratio,
        "tpot_p50_s": percentile(tpot, 50),
        "tpot_p90_s": percentile(tpot, 90),
        "stage_fallbacks": rung.fallbacks,
        "requests": len(rung.records),
        "completed": len(ok),
        "failures_by_type": dict(sorted(kinds.items())),
        "encode_outcomes": rung.encode_outcomes or _counts(r.encode for r in rung.records),
        "encode_reasons": rung.encode_reasons or _counts(r.encode_reason for r in rung.records),
        "duration_s": rung.duration_s,
        "span_s": span,
        "mode": rung.mode,
        "workload": workload,
        **_prediction_errors(ok, rung.prediction_errors),
    }


def _counts(values: Iterable[str | None]) -> dict[str, int]:
    """How many times each value occurs (``None`` not counted), by value."""
    return dict(sorted(Counter(v for v in values if v).items()))


def _prediction_errors(
    ok: Sequence[RequestRecord], histogram: dict[str, dict[float, float]] | None = None
) -> dict[str, Any]:
    """Median absolute error of the predicted TTFT (seconds, and relative to the observed one),
    overall and per endpoint; nothing when the system predicts none. Exact from the requests'
    own predictions (the DES); else, over HTTP, read off the gateway's error histogram
    (bucket-interpolated, no relative error), and ``ttft_prediction_error_source`` says so."""
    pairs = [(r.endpoint or "", r.predicted_ttft_s, r.ttft_s) for r in ok if r.predicted_ttft_s is not None]
    if not pairs:
        if not histogram:
            return {}
        return {
            "ttft_prediction_abs_error_p50_s": histogram_quantile(0.5, merged(histogram)),
            "ttft_prediction_abs_error_p50_s_by_endpoint": {
                ep: histogram_quantile(0.5, buckets) for ep, buckets in sorted(histogram.items())
            },
            "ttft_prediction_error_source": "gateway histogram",
        }
    by_endpoint: dict[str, list[float]] = {}
    for endpoint, predicted, observed in pairs:
        if observed is not None:
            by_endpoint.setdefault(endpoint, []).append(abs(predicted - observed))
    errors = [e for es in by_endpoint.values() for e in es]
    relative = [abs(p - o) / o for _, p, o in pairs if o]
    return {
        "ttft_prediction_abs_error_p50_s": percentile(errors, 50),
        "ttft_prediction_rel_error_p50": percentile(relative, 50),
        "ttft_prediction_abs_error_p50_s_by_endpoint": {
            ep: percentile(es, 50) for ep, es in sorted(by_endpoint.items())
        },
    }


def sustained_rate(records: Sequence[dict[str, Any]], ttft_slo_s: float) -> float | None:
    """The highest rate up to which every rung kept TTFT p90 within the SLO without failures: the
    saturation point read off a ladder (a queue that grows shows first in TTFT). ``None``: none did."""
    best = None
    for rec in sorted(records, key=lambda r: r["rate"]):
        p90 = rec["ttft_p90_s"]
        if p90 is None or p90 > ttft_slo_s or rec["failures"] > 0:
            break
        best = rec["rate"]
    return best


def by_system(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        out.setdefault(rec["system"], []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r["rate"])
    return out


def write_json(records: Sequence[dict[str, Any]], path: Path, meta: dict[str, Any] | None = None) -> None:
    results.write_json(path, {"meta": meta or {}, "records": list(records)})


def read_json(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return data, {}
    return list(data["records"]), dict(data.get("meta") or {})


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def markdown(records: Sequence[dict[str, Any]], title: str = "", ttft_slo_s: float = 2.0) -> str:
    """A table per system and rate, then the sustained rate per system under the TTFT p90 SLO."""
    cols = [
        ("system", "system"),
        ("rate", "rate"),
        ("output_tokens_per_s", "out tok/s"),
        ("requests_per_s", "req/s"),
        ("ttft_p50_s", "TTFT p50"),
        ("ttft_p90_s", "TTFT p90"),
        ("ttft_p99_s", "TTFT p99"),
        ("itl_p50_s", "ITL p50"),
        ("itl_p90_s", "ITL p90"),
        ("e2e_p50_s", "E2E p50"),
        ("e2e_p90_s", "E2E p90"),
        ("failures", "fail"),
        ("prefix_cache_hit_ratio", "prefix hit"),
        ("encoder_cache_hit_ratio", "enc hit"),
    ]
    lines = [f"### {title}", ""] if title else []
    groups = by_system(records)
    rows = ([_fmt(rec.get(k)) for k, _ in cols] for recs in groups.values() for rec in recs)
    lines += results.markdown_table([h for _, h in cols], rows)
    lines.append("")
    lines.append(f"Sustained rate (every rung up to it kept TTFT p90 ≤ {ttft_slo_s:g} s with no failures):")
    lines.append("")
    for name, recs in groups.items():
        rate = sustained_rate(recs, ttft_slo_s)
        lines.append(f"- {name}: {_fmt(rate) + ' req/s' if rate is not None else 'below the lowest rung'}")
    lines.append("")
    return "\n".join(lines)


def compare(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], a_name: str, b_name: str) -> str:
    """Per system and rate present in both reports: throughput and TTFT side by side, with the
    relative difference of ``a`` against ``b`` (how the consistency check is read)."""
    index = {(r["system"], r["rate"]): r for r in b}
    pairs = ("out tok/s", "Δ", "TTFT p50", "TTFT p90", "prefix hit")
    cols = [c if c == "Δ" else f"{c} {n}" for c in pairs for n in ((a_name, b_name) if c != "Δ" else ("",))]
    rows = []
    for ra in sorted(a, key=lambda r: (r["system"], r["rate"])):
        rb = index.get((ra["system"], ra["rate"]))
        if rb is None:
            continue
        delta = ""
        if rb["output_tokens_per_s"]:
            delta = f"{(ra['output_tokens_per_s'] / rb['output_tokens_per_s'] - 1) * 100:+.1f}%"
        cells = [
            ra["system"],
            _fmt(ra["rate"]),
            _fmt(ra["output_tokens_per_s"]),
            _fmt(rb["output_tokens_per_s"]),
            delta,
        ]
        for key in ("ttft_p50_s", "ttft_p90_s", "prefix_cache_hit_ratio"):
            cells += [_fmt(ra.get(key)), _fmt(rb.get(key))]
        rows.append(cells)
    return "\n".join(results.markdown_table(["system", "rate", *cols], rows)) + "\n"


def plot(records: Sequence[dict[str, Any]], out_dir: Path, title: str = "") -> list[Path]:
    """Three PNGs, one line per system: throughput, TTFT p50/p90 (log) and cache hit ratios vs rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    groups = by_system(records)
    prefix = f"{title}: " if title else ""
    written = []

    def finish(fig: Any, ax: Any, name: str, ylabel: str) -> None:
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, recs in groups.items():
        ax.plot([r["rate"] for r in recs], [r["output_tokens_per_s"] for r in recs], marker="o", label=name)
    ax.set_title(prefix + "output throughput")
    finish(fig, ax, "throughput.png", "output tokens/s")

    def solid_and_dashed(solid: tuple[str, str, str], dashed: tuple[str, str, str]) -> Any:
        """One colour per system: ``solid`` and ``dashed`` are (record key, label suffix, marker)."""
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for i, (name, recs) in enumerate(groups.items()):
            rates = [r["rate"] for r in recs]
            for (key, suffix, marker), ls in ((solid, "-"), (dashed, "--")):
                values = [_nan(r[key]) for r in recs]
                ax.plot(rates, values, ls=ls, marker=marker, color=f"C{i}", label=f"{name} {suffix}")
        return fig, ax

    fig, ax = solid_and_dashed(("ttft_p90_s", "p90", "o"), ("ttft_p50_s", "p50", "."))
    ax.set_yscale("log")
    ax.set_title(prefix + "time to first token")
    finish(fig, ax, "ttft.png", "TTFT (s, log scale)")

    fig, ax = solid_and_dashed(
        ("prefix_cache_hit_ratio", "prefix", "o"), ("encoder_cache_hit_ratio", "encoder", "s")
    )
    ax.set_ylim(0, 1.05)
    ax.set_title(prefix + "cache hit ratio (prefix: tokens, encoder: items)")
    finish(fig, ax, "cache_hit.png", "hit ratio")
    return written


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def write_all(
    records: Sequence[dict[str, Any]],
    out_dir: Path,
    title: str = "",
    meta: dict[str, Any] | None = None,
    ttft_slo_s: float = 2.0,
) -> list[Path]:
    """report.json, report.md and the PNGs into ``out_dir``."""
    write_json(records, out_dir / "report.json", meta)
    (out_dir / "report.md").write_text(markdown(records, title, ttft_slo_s))
    return [out_dir / "report.json", out_dir / "report.md", *plot(records, out_dir, title)]
