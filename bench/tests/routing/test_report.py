"""Report records carry the promised fields and numbers; markdown, JSON and PNGs are written."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate_bench.cli import main as bench
from mmgate_bench.routing import report
from mmgate_bench.routing.records import CacheCounters, RequestRecord, RungResult


def _rung(system: str, rate: float, ttft: float, failures: int = 0) -> RungResult:
    records = [
        RequestRecord(
            f"r{i}",
            i / rate,
            ttft_s=ttft * (1 + i / 10),
            e2e_s=ttft + 1.0,
            output_tokens=11,
            itl_s=[0.1] * 10,
        )
        for i in range(10)
    ]
    records += [RequestRecord("x", 0.0, error="http_503") for _ in range(failures)]
    return RungResult(system, rate, 10.0, 12.5, records, CacheCounters(100, 40, 10, 9))


def test_summary_has_every_field_with_the_right_numbers() -> None:
    rec = report.summarize(_rung("rr", 1.0, 0.5, failures=2), "shared-prefix")
    assert set(report.FIELDS) <= set(rec)
    assert rec["system"] == "rr" and rec["rate"] == 1.0 and rec["workload"] == "shared-prefix"
    assert rec["output_tokens_per_s"] == pytest.approx(110 / 12.5)
    assert rec["requests_per_s"] == pytest.approx(10 / 12.5)
    assert rec["ttft_p50_s"] == pytest.approx(0.5 * 1.45)
    assert rec["ttft_p99_s"] <= 0.5 * 1.9 + 1e-9
    assert rec["itl_p50_s"] == pytest.approx(0.1) and rec["e2e_p90_s"] == pytest.approx(1.5)
    assert rec["failures"] == 2 and rec["failures_by_type"] == {"http_503": 2}
    assert rec["prefix_cache_hit_ratio"] == 0.4 and rec["encoder_cache_hit_ratio"] == 0.9


def test_sustained_rate_is_the_last_rung_within_the_slo() -> None:
    recs = [report.summarize(_rung("a", r, t)) for r, t in [(5, 0.2), (10, 0.5), (15, 3.0), (20, 0.1)]]
    assert report.sustained_rate(recs, ttft_slo_s=1.0) == 10
    assert report.sustained_rate(recs, ttft_slo_s=0.1) is None


def test_files_are_written_and_replotted(tmp_path: Path) -> None:
    recs = [report.summarize(_rung(s, r, t), "w") for s in ("rr", "mm") for r, t in [(5, 0.2), (10, 0.4)]]
    written = report.write_all(recs, tmp_path, title="w", meta={"pods": 8})
    names = {p.name for p in written}
    assert names == {"report.json", "report.md", "throughput.png", "ttft.png", "cache_hit.png"}
    loaded, meta = report.read_json(tmp_path / "report.json")
    assert loaded == recs and meta == {"pods": 8}
    md = (tmp_path / "report.md").read_text()
    assert md.count("| rr |") == 2 and "Sustained rate" in md
    for png in ("throughput.png", "ttft.png", "cache_hit.png"):
        (tmp_path / png).unlink()

    assert bench(["plot", str(tmp_path)]) == 0
    assert (tmp_path / "ttft.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_lines_up_two_reports() -> None:
    a = [report.summarize(_rung("mm", 5, 0.2)), report.summarize(_rung("mm", 10, 0.3))]
    b = [report.summarize(_rung("mm", 5, 0.25))]
    text = report.compare(a, b, "http", "des")
    lines = text.strip().splitlines()
    assert "out tok/s http" in lines[0] and "TTFT p90 des" in lines[0]
    assert len(lines) == 3  # header, rule, the one (system, rate) both have
    assert "| mm | 5 |" in lines[2] and "+0.0%" in lines[2]


def test_prediction_errors_are_reported_when_the_system_predicts() -> None:
    records = [
        RequestRecord("a", 0.0, ttft_s=1.0, e2e_s=2.0, endpoint="p:1", predicted_ttft_s=0.8),
        RequestRecord("b", 0.1, ttft_s=0.5, e2e_s=1.0, endpoint="p:1", predicted_ttft_s=0.6),
        RequestRecord("c", 0.2, ttft_s=0.2, e2e_s=1.0, endpoint="p:2", predicted_ttft_s=0.2),
        RequestRecord("d", 0.3, error="timeout", predicted_ttft_s=9.0),  # failures are not scored
    ]
    rec = report.summarize(RungResult("predicted-ttft", 1.0, 1.0, 1.0, records))
    assert rec["ttft_prediction_abs_error_p50_s"] == pytest.approx(0.1)
    assert rec["ttft_prediction_rel_error_p50"] == pytest.approx(0.2)
    assert rec["ttft_prediction_abs_error_p50_s_by_endpoint"] == pytest.approx({"p:1": 0.15, "p:2": 0.0})
    plain = report.summarize(RungResult("round-robin", 1.0, 1.0, 1.0, [RequestRecord("a", 0.0, 1.0, 2.0)]))
    assert "ttft_prediction_abs_error_p50_s" not in plain


def test_over_http_the_prediction_error_comes_from_the_gateways_histogram() -> None:
    inf = float("inf")
    histogram = {"p:1": {0.01: 1.0, 0.02: 3.0, inf: 3.0}, "p:2": {0.01: 1.0, 0.02: 1.0, inf: 1.0}}
    rung = RungResult(
        "predicted-ttft", 1.0, 1.0, 1.0, [RequestRecord("a", 0.0, 1.0, 2.0)], prediction_errors=histogram
    )
    rec = report.summarize(rung)
    assert rec["ttft_prediction_error_source"] == "gateway histogram"
    assert rec["ttft_prediction_abs_error_p50_s"] == pytest.approx(
        0.01
    )  # rank 2 of 4: the first bucket's top
    assert rec["ttft_prediction_abs_error_p50_s_by_endpoint"] == pytest.approx({"p:1": 0.0125, "p:2": 0.005})
    assert "ttft_prediction_rel_error_p50" not in rec
