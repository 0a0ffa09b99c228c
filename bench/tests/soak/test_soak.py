"""The soak summary: outcomes counted, latency percentiles per minute of the run, memory trend."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from mmgate_bench.results import write_json
from mmgate_bench.soak.soak import Record, plot, summarize


def test_summary_groups_latencies_by_minute_and_skips_failures(tmp_path: Path) -> None:
    records = [Record(t=float(i), kind="text", outcome="ok", latency_s=0.01 * (i + 1)) for i in range(60)]
    records += [Record(t=61.0, kind="image", outcome="ok", latency_s=0.5)]
    records += [Record(t=62.0, kind="bad", outcome="http_400_invalid_request", latency_s=9.0)]
    result: dict[str, object] = {
        "records": [asdict(r) for r in records],
        "rss_mb": [(0.0, 40.0), (30.0, 47.5), (60.0, 45.0)],
    }
    summary = summarize(result)
    assert summary["requests"] == 62
    assert summary["by_outcome"] == {"ok": 61, "http_400_invalid_request": 1}
    assert summary["by_kind"] == {"text": 60, "image": 1, "bad": 1}
    assert summary["p50_by_minute_s"] == {0: 0.305, 1: 0.5}  # 0.01..0.60 interpolated; the 400 is left out
    assert summary["p99_by_minute_s"] == {0: round(0.59 + 0.41 * 0.01, 4), 1: 0.5}
    assert (summary["rss_first_mb"], summary["rss_max_mb"], summary["rss_last_mb"]) == (40.0, 47.5, 45.0)
    write_json(tmp_path / "soak.json", result | {"summary": summary})  # int minute keys are written
    plot(result, summary, tmp_path / "soak.png")
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"
