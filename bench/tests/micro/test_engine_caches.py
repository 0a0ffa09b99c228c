"""The engine-caches benchmark runs end to end on the tiny model: the replies agree across cache
settings, and each cache skips the work it exists to skip on a follow-up turn."""

import json
from pathlib import Path

from mmgate_bench.cli import main as bench


def test_engine_caches_benchmark_runs_and_each_cache_skips_its_stage(tmp_path: Path) -> None:
    out = tmp_path / "engine-caches.json"
    args = ["--turns", "2", "--output-tokens", "2", "--width", "320", "--height", "240", "--rounds", "1"]
    assert bench(["engine-caches", *args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["replies_identical"] is True
    s = report["summary"]
    assert set(s) == {"stateless", "encoder", "encoder+prefix", "all"}
    assert s["stateless"]["followup_encoder_ms"] > 0 and s["stateless"]["followup_cached_fraction"] == 0
    assert s["encoder"]["followup_encoder_ms"] == 0  # the page's features came from the cache
    assert s["encoder+prefix"]["followup_cached_fraction"] > 0
    assert s["encoder+prefix"]["followup_processor_ms"] > 0 and s["all"]["followup_processor_ms"] == 0
    assert all(0 < x["followup_ttft_cpu_ms"] <= x["followup_ttft_ms"] * 1.05 for x in s.values())
    assert [len(turns) for turns in report["samples"]["all"]] == [2]


def test_bad_flags_exit_2(tmp_path: Path) -> None:
    assert bench(["engine-caches", "--turns", "1", "--out", str(tmp_path / "x.json")]) == 2
